{
  # C++ exceptions are on (NAPI_CPP_EXCEPTIONS, and -fno-exceptions removed) on purpose:
  # node-addon-api then turns a failed Node-API call into a thrown Napi::Error that unwinds through
  # the RAII owners (Fd, OwnedBuffer, Landing), so a descriptor or buffer is released on every
  # early exit without a status check after each call, and a bad argument becomes a JS TypeError
  # instead of a pending exception someone has to remember to check. The syscall files (no napi.h)
  # do not use exceptions for outcomes: they report through Failure and stable codes.
  "targets": [
    {
      "target_name": "resource_plane",
      "sources": [
        "native/addon.cc",
        "native/compat.cc",
        "native/bind_common.cc",
        "native/bind_exports.cc",
        "native/bind_landing.cc",
        "native/bind_landlock.cc",
        "native/bind_sockets.cc",
        "native/bind_stream.cc",
        "native/bind_workdir.cc",
        "native/codes.cc",
        "native/resolve.cc",
        "native/sha256.cc",
        "native/read.cc",
        "native/stream.cc",
        "native/list.cc",
        "native/listing_json.cc",
        "native/write.cc",
        "native/lease.cc",
        "native/digest_cache.cc",
        "native/landlock.cc",
        "native/sockets.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "_GNU_SOURCE"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2"],
      # The prebuilds' floor (README, "Native addon and prebuilds"): export only the N-API entry
      # points, so native/compat.cc's definitions stay inside the binary.
      "ldflags": ["-Wl,--version-script=<(module_root_dir)/native/exports.map"]
    }
  ]
}
