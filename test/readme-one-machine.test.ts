import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliAsync } from './helpers/cli.js';
import { qdrantTarget, type QdrantTarget } from './helpers/qdrant-server.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * The README's "One machine" section as a new reader runs it: its config file, then its `init` and `check` lines
 * with nothing in the environment but what those lines set. Every command reads the whole file, so each `${VAR}`
 * of it must be set by the lines themselves (an unset one is exit 2 before the store is opened).
 */
const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

function section(title: string): string {
  const start = README.indexOf(`### ${title}`);
  expect(start, title).toBeGreaterThanOrEqual(0);
  const end = README.indexOf('\n### ', start + 4);
  return README.slice(start, end < 0 ? undefined : end);
}

const block = (text: string, lang: string): string => {
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(text);
  expect(m, lang).not.toBeNull();
  return m![1]!;
};

describe('README: one machine', () => {
  let dir: string;
  let cleanup: () => void;
  let qdrant: QdrantTarget;
  beforeEach(async () => {
    ({ dir, cleanup } = tempDir());
    qdrant = await qdrantTarget();
  });
  afterEach(async () => {
    await qdrant.close();
    cleanup();
  });

  it('its init and check lines run as written, with the environment they set', async () => {
    const text = section('One machine, under pm2 or systemd');
    const yaml = block(text, 'yaml');
    const sh = block(text, 'sh');
    const store = makeStore(join(dir, 'memory.db'));
    const collection = qdrant.name('memories');
    await qdrant.createCollection(collection);
    mkdirSync(join(dir, 'etc'));
    const config = join(dir, 'etc', 'config.yaml');
    const local = (s: string) =>
      s.replaceAll('/srv/agent/memory.db', store)
        .replaceAll('/etc/memory-warden/config.yaml', config)
        .replaceAll('/var/lib/memory-warden/state.db', join(dir, 'state', 'state.db'))
        .replaceAll('/var/backups/memory-warden', join(dir, 'backups'))
        .replaceAll('http://127.0.0.1:6333', qdrant.url)
        .replaceAll('[memories]', `[${collection}]`);
    writeFileSync(config, local(yaml));

    // Nothing from this machine's environment: each variable the file names is unset unless the lines set it.
    const env: Record<string, string> = {};
    for (const [, name] of yaml.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)) env[name!] = '';
    const lines = sh.split('\n').map((l) => l.replace(/\s+#.*$/, '').trim()).filter(Boolean);
    let ran = 0;
    for (const line of lines) {
      const exported = /^export\s+(.*)$/.exec(line);
      if (exported) {
        for (const [, name] of exported[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=\S*/g)) env[name!] = name === 'QDRANT_API_KEY' && qdrant.apiKey ? qdrant.apiKey : `readme-${name!.toLowerCase()}`;
        continue;
      }
      if (!/^memory-warden (init|check) /.test(line)) continue;
      const r = await cliAsync(local(line).split(/\s+/).slice(1), env);
      expect(r.code, `${line}\n${r.stderr}`).toBe(0);
      ran++;
    }
    expect(ran).toBe(2);
    qdrant.assertConforms();
  });
});
