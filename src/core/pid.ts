/**
 * Whether a process with this pid is running (this one included). A pid we may not signal belongs to someone
 * else's running process: running. What names a copy by the pid of the run that made it (a restore's download
 * folder, a spool file) asks this before calling it a leftover: a pid reused since only keeps a leftover longer.
 */
export function running(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
