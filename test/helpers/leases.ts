// Whether this process may take a read lease (F_SETLEASE, F_RDLCK) on a file it owns in `dir`: the
// digest cache needs one (fs.leases-enable, and a filesystem that grants them). Python's fcntl
// takes it, so the probe holds no descriptor of the test's own.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const TAKE_LEASE = 'import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)';

/** True when a read lease is granted on a new file in `dir`; else false, saying so once for `who`. */
export function leasesWork(dir: string, who?: string): boolean {
  const probe = join(dir, '.lease-probe');
  writeFileSync(probe, 'x');
  try {
    execFileSync('python3', ['-c', TAKE_LEASE, probe], { stdio: 'ignore' });
    return true;
  } catch {
    if (who) console.warn(`[${who}] read leases are refused here: the digest cache is never used, and the tests that need it are skipped`);
    return false;
  } finally {
    rmSync(probe, { force: true });
  }
}
