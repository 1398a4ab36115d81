/* Test helper: exchanges two paths with renameat2(RENAME_EXCHANGE) as fast as it can, to race the
 * resolver, until it receives SIGTERM; then restores the original order and prints how many
 * exchanges it made. Races are bounded by
 * the interleavings the test observes, not by a swap count, so a slow machine only takes longer.
 * Built by the race helper with the system C compiler. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

static volatile sig_atomic_t stop = 0;

static void on_term(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: swapper A B   (runs until SIGTERM)\n");
    return 2;
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  long done = 0, failed = 0;
  while (!stop) {
    if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0) done++;
    else failed++;
  }
  /* Leave the two paths as they were found, so a test can race the same tree again. */
  while (done % 2 != 0) {
    if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0) done++;
    else return 1;
  }
  printf("%ld %ld\n", done, failed);
  return 0;
}
