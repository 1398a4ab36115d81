/* Test helper: exchanges two paths with renameat2(RENAME_EXCHANGE) `count` times, as fast as it
 * can, to race the resolver. Built by the race test with the system C compiler. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: swapper A B COUNT\n");
    return 2;
  }
  long count = strtol(argv[3], NULL, 10);
  long done = 0;
  for (long i = 0; i < count; i++) {
    if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0) done++;
  }
  printf("%ld\n", done);
  return done == count ? 0 : 1;
}
