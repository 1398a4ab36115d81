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

// Maps the file MAP_SHARED read-write, read-faults its first page, writes `data` at offset 0 through
// the mapping and unmaps. Python's mmap holds a dup of the descriptor until close(); the process
// then exits, so no writer is left and a read lease is granted again. On tmpfs the bytes change and
// no time does (STACK.md).
const MAP_WRITE = String.raw`
import mmap, os, sys
path, data = sys.argv[1], sys.argv[2].encode()
fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
m = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
assert m[0] is not None
m[0:len(data)] = data
m.close()
`;

/** Writes `data` at the start of `path` through a shared writable mapping (see MAP_WRITE). */
export function mappedWrite(path: string, data: string): void {
  execFileSync('python3', ['-c', MAP_WRITE, path, data], { stdio: ['ignore', 'ignore', 'inherit'] });
}
