{
  "targets": [
    {
      "target_name": "resource_plane",
      "sources": [
        "native/addon.cc",
        "native/workers.cc",
        "native/codes.cc",
        "native/resolve.cc",
        "native/read.cc",
        "native/list.cc",
        "native/write.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "_GNU_SOURCE"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2"]
    }
  ]
}
