// pm2 (not a dependency of memory-warden: install it once, `npm install --global pm2`), from the folder memory-warden
// is built in: `npm run build && pm2 start ecosystem.config.cjs` (then `pm2 save` to keep it across reboots).
// The config file: MEMORY_WARDEN_CONFIG in the environment `pm2 start` runs in, else /etc/memory-warden/config.yaml;
// REDIS_URL, SMTP_PASSWORD, QDRANT_API_KEY and the other secrets come from that environment too, never from here.
// The worker sends process.send('ready') once Redis is connected, its job schedulers are in place and /metrics
// listens; pm2 waits for that (wait_ready) before it counts the start as done. On stop or reload pm2 sends SIGINT:
// the worker takes no new job and lets the running one finish (worker.shutdownTimeoutMs, 300 s by default), so
// kill_timeout must stay above that, or pm2 SIGKILLs a job mid-run (which is safe, the job runs again on another
// worker, but wasteful).
const DEFAULT_CONFIG = '/etc/memory-warden/config.yaml';

module.exports = {
  apps: [
    {
      name: 'memory-warden',
      script: 'dist/src/cli.js',
      args: 'worker',
      cwd: __dirname,
      exec_mode: 'fork',
      // More replicas are safe (they share the schedulers and never run one job twice); one per machine is usual.
      instances: 1,
      wait_ready: true,
      listen_timeout: 30_000, // ms to wait for 'ready' (Redis connect + scheduler sync)
      kill_timeout: 330_000, // ms between SIGINT and SIGKILL: worker.shutdownTimeoutMs + 30 s
      // Exit 2 means it could not start (bad config, Redis down): retry with a growing delay, not in a tight loop.
      exp_backoff_restart_delay: 1_000,
      max_memory_restart: '1G',
      env: {
        NODE_ENV: 'production',
        MEMORY_WARDEN_CONFIG: process.env.MEMORY_WARDEN_CONFIG || DEFAULT_CONFIG,
      },
    },
  ],
};
