import { describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { createLogger } from '../src/log/logger.js';
import { escapedLine } from '../src/text/untrusted.js';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';
import { FORGED, RAW, TERMINAL_PAYLOADS } from './helpers/terminal-payloads.js';

/**
 * A log line is read in a terminal too (`tail -f`, `journalctl`, pm2 logs, a CLI run's stderr): what it carries
 * from a store, a path or Redis cannot drive that terminal. JSON lines stay JSON that parses back to the exact
 * values, with every hidden character JSON.stringify leaves raw (C1, DEL, bidi controls, U+2028/2029, U+200E,
 * U+061C) written as a \uXXXX escape; pretty lines show each value on one line with those characters named.
 */

const payloads = Object.entries(TERMINAL_PAYLOADS);

function capture(pretty = false) {
  const raw: string[] = [];
  const log = createLogger({ level: 'debug', pretty, destination: { write: (s: string) => raw.push(s) } as unknown as NodeJS.WritableStream });
  return { log, raw };
}

/** Every value a log call can carry: message, fields, nested fields, a key, a child's bindings, an error. */
function logEverything(log: ReturnType<typeof createLogger>, p: string): void {
  log.child({ host: `h${p}` }).info({ store: `s${p}`, nested: { list: [`l${p}`] }, [`k${p}`]: 1, err: new Error(`e${p}`) }, `m${p}`);
  log.warn(`short${p}`);
}

describe('JSON log lines', () => {
  it.each(payloads)('%s: no raw character, and JSON.parse gives back the exact values', (_, p) => {
    const { log, raw } = capture();
    logEverything(log, p);
    expect(raw).toHaveLength(2);
    for (const line of raw) {
      expect(line.endsWith('\n')).toBe(true);
      expect(line.slice(0, -1)).not.toContain('\n');
      expect(line).not.toMatch(RAW);
    }
    const [first, second] = raw.map((l) => JSON.parse(l));
    expect(first.msg).toBe(`m${p}`);
    expect(first.host).toBe(`h${p}`);
    expect(first.store).toBe(`s${p}`);
    expect(first.nested).toEqual({ list: [`l${p}`] });
    expect(first[`k${p}`]).toBe(1);
    expect(first.err.message).toBe(`e${p}`);
    expect(second.msg).toBe(`short${p}`);
  });

  it('a lone surrogate is an escape too, and parses back to itself', () => {
    const { log, raw } = capture();
    log.info({ id: 'a\uD800b' }, 'x\uDC00');
    const line = JSON.parse(raw[0]!);
    expect([line.id, line.msg]).toEqual(['a\uD800b', 'x\uDC00']);
    expect(raw[0]).toContain('\\ud800');
  });
});

describe('pretty log lines', () => {
  it.each(payloads)('%s: each value on one line, its hidden characters named', (_, p) => {
    const { log, raw } = capture(true);
    logEverything(log, p);
    const out = raw.join('');
    expect(out).not.toMatch(RAW);
    expect(out).not.toMatch(FORGED);
    expect(out.split('\n')[0]).toMatch(/^\[[\d:.]+\] INFO: m/);
    for (const value of [`m${p}`, `h${p}`, `s${p}`, `l${p}`, `e${p}`, `short${p}`]) expect(out).toContain(escapedLine(value));
  });
});

describe('the built command line', () => {
  /** A log line's stderr with the colours pino-pretty writes taken out, and nothing else. */
  const uncoloured = (s: string) => s.replace(/\u001b\[\d+(?:;\d+)*m/g, '');

  it.each([
    ['a newline and a forged line', TERMINAL_PAYLOADS['a newline and a forged line']!],
    ['OSC 52 clipboard write', TERMINAL_PAYLOADS['OSC 52 clipboard write']!],
    ['C1 CSI (U+009B)', TERMINAL_PAYLOADS['C1 CSI (U+009B)']!],
    ['RLO (U+202E)', TERMINAL_PAYLOADS['RLO (U+202E)']!],
    ['line separator (U+2028)', TERMINAL_PAYLOADS['line separator (U+2028)']!],
  ])('a snapshot folder holding %s: JSON lines and --pretty lines on stderr', (_, p) => {
    const tmp = tempDir('mw-log-');
    try {
      const root = join(tmp.dir, `snaps${p}`);
      const config = join(tmp.dir, 'warden.yaml');
      writeFileSync(config, YAML.stringify({ stores: { agent: { db: makeStore(join(tmp.dir, 'agent.db'), [{ id: 'm1' }]) } }, snapshot: { root } }));
      const env = { MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(tmp.dir, 'state.db'), LOG_LEVEL: 'info' };
      // `snapshot done` logs the new folder, under the configured root.
      const json = cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], env);
      expect(json.code, json.stderr).toBe(0);
      expect(json.stderr).not.toMatch(RAW);
      const done = json.stderr.trimEnd().split('\n').map((l) => JSON.parse(l)).find((l) => l.msg === 'snapshot done');
      expect(done.dir).toBe(join(root, 'agent', '2026-11-29T020000Z'));

      const pretty = cli(['--pretty', 'run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T03:00:00Z'], env);
      expect(pretty.code, pretty.stderr).toBe(0);
      expect(pretty.stderr).toMatch(/INFO/);
      expect(pretty.stderr).not.toContain(p);
      expect(uncoloured(pretty.stderr)).not.toMatch(RAW);
      expect(uncoloured(pretty.stderr)).not.toMatch(FORGED);
      expect(uncoloured(pretty.stderr)).toContain(escapedLine(join(root, 'agent', '2026-11-29T030000Z')));
    } finally {
      tmp.cleanup();
    }
  });
});

describe('a field a child logger binds', () => {
  it('is written once when the call names it again with the same value, and both when they differ', () => {
    const { log, raw } = capture();
    const job = log.child({ job: 'snapshot', store: 'agent' });
    job.info({ store: 'agent', dir: '/x' }, 'snapshot done');
    job.info({ store: 'other' }, 'another store');
    expect(raw[0]!.match(/"store"/g)).toHaveLength(1);
    expect(JSON.parse(raw[0]!)).toMatchObject({ job: 'snapshot', store: 'agent', dir: '/x', msg: 'snapshot done' });
    expect(raw[1]!.match(/"store"/g)).toHaveLength(2);
  });
});
