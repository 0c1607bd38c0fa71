import { createHash, randomBytes } from 'node:crypto';
import type { SFTPWrapper } from 'ssh2';
import SftpClient from 'ssh2-sftp-client';
import { storeError, transientError, WardenError } from '../../../core/errors.js';
import { ownerOnlyText } from '../auth.js';
import { atMost, digestOf, hashing } from '../digest.js';
import { CLAIM_KEY, MANIFEST_KEY, TARGET_SNAPSHOT_NAME, checkNames, UnverifiedSnapshotError, type ObjectDigest, type SnapshotTarget, type TargetFactory } from '../types.js';
import { CHUNK, DEPTH, call, closeRemote, fsyncRemote, openRemote, readAll, writeAll } from './pipelined.js';
import type { SftpTargetConfig } from './schema.js';

const TMP = '.tmp-';

/**
 * A folder on an SSH host. Each file is written as `.tmp-<random>-<name>` (several writes in flight), fsynced where
 * the server has OpenSSH's fsync extension, its size checked, then renamed into place (posix-rename: atomic,
 * replaces). SFTP has no checksum of its own: what proves the file is the SSH channel (every packet carries a MAC,
 * so the server received exactly the bytes hashed and sent), every write answered OK at its own offset, and the
 * size of the open file once fsynced (nothing missing, nothing more). `verifyUploads: read-back` also reads every
 * file back whole and hashes it, for a server whose disk is not trusted to keep what it acknowledged.
 */
export class SftpTarget implements SnapshotTarget {
  readonly type = 'sftp';
  readonly name: string;
  readonly where: string;
  private readonly root: string;
  private readonly verify: SftpTargetConfig['verifyUploads'];

  /** `raw`: the session under `sftp`, for the pipelined reads and writes of pipelined.ts. */
  constructor(config: SftpTargetConfig, store: string, private readonly sftp: SftpClient, private readonly raw: SFTPWrapper) {
    this.name = config.name;
    this.verify = config.verifyUploads;
    this.root = `${config.path.replace(/\/+$/, '')}/${store}`;
    this.where = `sftp://${config.username}@${config.host}:${config.port}${this.root.startsWith('/') ? '' : '/~/'}${this.root}`;
  }

  async put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>): Promise<ObjectDigest> {
    checkNames(this.name, snapshot, key);
    const final = `${this.root}/${snapshot}/${key}`;
    const dir = final.slice(0, final.lastIndexOf('/'));
    const tmp = `${dir}/${TMP}${randomBytes(4).toString('hex')}-${key.split('/').pop()}`;
    return this.op('upload', final, async () => {
      await this.sftp.mkdir(dir, true);
      try {
        const h = hashing(body, 'always'); // on the hashing thread, beside the SSH channel's cipher on this one
        const out = await openRemote(this.raw, tmp, 'wx');
        let size: number;
        try {
          await writeAll(this.raw, out, h.stream);
          await fsyncRemote(this.raw, out);
          size = (await call<{ size: number }>((cb) => this.raw.fstat(out, cb))).size;
        } catch (err) {
          await closeRemote(this.raw, out).catch(() => undefined);
          throw err;
        }
        await closeRemote(this.raw, out);
        const sent = h.digest();
        const stored = this.verify === 'read-back' ? await digestOf(readRemote(this.raw, tmp)) : { bytes: size, sha256: sent.sha256 };
        if (stored.sha256 !== sent.sha256 || stored.bytes !== sent.bytes || size !== sent.bytes) {
          throw transientError(`target ${this.name}: ${tmp} holds sha256 ${stored.sha256} (${stored.bytes} bytes), ${sent.sha256} (${sent.bytes} bytes) sent`);
        }
        await this.sftp.posixRename(tmp, final);
        return sent;
      } finally {
        await this.sftp.delete(tmp, true).catch(() => undefined);
      }
    });
  }

  async list(): Promise<string[]> {
    const out: string[] = [];
    for (const n of await this.folders()) if (await this.sftp.exists(`${this.root}/${n}/${MANIFEST_KEY}`)) out.push(n);
    return out;
  }

  async keys(snapshot: string): Promise<string[]> {
    checkNames(this.name, snapshot);
    return this.op('list', `${this.root}/${snapshot}`, async () => ((await this.sftp.exists(`${this.root}/${snapshot}`)) ? (await this.walk(`${this.root}/${snapshot}`, '')).filter((k) => !k.split('/').pop()!.startsWith(TMP)).sort() : []));
  }

  /**
   * Only a regular file (asked without following a link: a FIFO would hold the server's read, a link could lead
   * anywhere), and only its first maxBytes + 1 bytes are asked for, whatever size the server gives.
   */
  async get(snapshot: string, key: string, _signal: AbortSignal | undefined, maxBytes: number): Promise<AsyncIterable<Uint8Array>> {
    checkNames(this.name, snapshot, key);
    const path = `${this.root}/${snapshot}/${key}`;
    await this.op('download', path, async () => {
      let attrs: { mode: number };
      try {
        attrs = await new Promise((resolve, reject) => this.raw.lstat(path, (err, a) => (err ? reject(err) : resolve(a))));
      } catch (err) {
        if ((err as { code?: number }).code === 2) throw storeError(`target ${this.name}: ${path} does not exist`, err);
        throw err;
      }
      if ((attrs.mode & 0o170000) !== 0o100000) throw new UnverifiedSnapshotError(`target ${this.name}: ${path} is not a regular file (mode ${attrs.mode.toString(8)})`);
    });
    return atMost(readRemote(this.raw, path, maxBytes + 1), maxBytes, `target ${this.name}: ${path}`);
  }

  async names(): Promise<string[]> {
    const out: string[] = [];
    for (const n of await this.folders()) if ((await this.op('list', `${this.root}/${n}`, () => this.walk(`${this.root}/${n}`, ''))).length > 0) out.push(n);
    return out;
  }

  async delete(snapshot: string): Promise<void> {
    checkNames(this.name, snapshot);
    const dir = `${this.root}/${snapshot}`;
    await this.op('delete', dir, async () => {
      if (!(await this.sftp.exists(dir))) return;
      // The manifest first, the claim last: every step of the way, what is left is proven memory-warden's.
      await this.sftp.delete(`${dir}/${MANIFEST_KEY}`, true);
      for (const rel of (await this.walk(dir, '')).filter((k) => k !== MANIFEST_KEY && k !== CLAIM_KEY).sort()) await this.sftp.delete(`${dir}/${rel}`, true);
      await this.sftp.delete(`${dir}/${CLAIM_KEY}`, true);
      await this.sftp.rmdir(dir, true);
    });
  }

  async cleanPartial(): Promise<string[]> {
    const removed = await this.temps();
    for (const t of removed) await this.op('clean', `${this.root}/${t}`, () => this.sftp.delete(`${this.root}/${t}`, true));
    return removed.map((t) => `${this.name}:${t}`);
  }

  async leftovers(): Promise<string[]> {
    return (await this.temps()).map((t) => `${this.name}:${t}`);
  }

  /** Temp files a killed put left, as `<snapshot>/<path>`. */
  private async temps(): Promise<string[]> {
    const out: string[] = [];
    for (const n of await this.folders()) {
      const dir = `${this.root}/${n}`;
      for (const rel of await this.op('list', dir, () => this.walk(dir, ''))) if (rel.split('/').pop()!.startsWith(TMP)) out.push(`${n}/${rel}`);
    }
    return out;
  }

  async close(): Promise<void> {
    await this.sftp.end().catch(() => undefined);
  }

  private async folders(): Promise<string[]> {
    return this.op('list', this.root, async () => {
      if (!(await this.sftp.exists(this.root))) return [];
      return (await this.sftp.list(this.root)).filter((e) => e.type === 'd' && TARGET_SNAPSHOT_NAME.test(e.name)).map((e) => e.name).sort();
    });
  }

  private async walk(dir: string, rel: string): Promise<string[]> {
    const out: string[] = [];
    for (const e of await this.sftp.list(rel ? `${dir}/${rel}` : dir)) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.type === 'd') out.push(...(await this.walk(dir, r)));
      else if (e.type === '-') out.push(r);
    }
    return out;
  }

  /** Not-found and permission answers are permanent; a dropped connection or timeout is transient. */
  private async op<T>(doing: string, path: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      if (err instanceof WardenError) throw err;
      const e = err as { code?: string | number; message?: string };
      const what = `target ${this.name}: ${doing} ${path}: ${e.message ?? String(err)}`;
      const permanent = e.code === 2 || e.code === 3 || e.code === 'ENOENT' || /no such file|permission denied/i.test(e.message ?? '');
      throw permanent ? storeError(what, err) : transientError(what, err);
    }
  }
}

/** A remote file's bytes (reads pipelined), its handle closed before the generator ends, whatever happens. */
async function* readRemote(raw: SFTPWrapper, path: string, limit = Infinity): AsyncIterable<Buffer> {
  const handle = await openRemote(raw, path, 'r');
  try {
    yield* readAll(raw, handle, DEPTH, CHUNK, limit);
  } finally {
    await closeRemote(raw, handle).catch(() => undefined);
  }
}

/** SHA256:… of a host key blob, as ssh-keygen prints it (base64 without padding). */
export function hostKeyFingerprint(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

export const createSftpTarget: TargetFactory<SftpTargetConfig> = async (config, store) => {
  let privateKey = config.privateKey;
  if (config.privateKeyFile) privateKey = ownerOnlyText(config.name, 'private key', config.privateKeyFile);
  const want = config.hostKeySha256.replace(/=+$/, '');
  let seen: string | undefined;
  // Our own no-op listeners: the library's defaults print to stdout on every close.
  const quiet = () => undefined;
  const sftp = new SftpClient(`memory-warden:${config.name}`, { end: quiet, close: quiet, error: quiet } as never);
  let raw: SFTPWrapper;
  try {
    raw = await sftp.connect({
      host: config.host,
      port: config.port,
      username: config.username,
      privateKey,
      passphrase: config.passphrase,
      password: config.password,
      readyTimeout: config.timeoutMs,
      // A host that stops answering mid-upload is noticed (and the job fails as transient) instead of hanging.
      keepaliveInterval: Math.max(1000, Math.floor(config.timeoutMs / 3)),
      keepaliveCountMax: 3,
      hostVerifier: (key: Buffer) => (seen = hostKeyFingerprint(key)) === want,
    });
  } catch (err) {
    if (seen !== undefined && seen !== want) {
      throw storeError(`target ${config.name}: ${config.host}:${config.port} presented host key ${seen}, config says ${want}; not connecting`);
    }
    throw transientError(`target ${config.name}: connect to ${config.host}:${config.port}: ${(err as Error).message}`, err);
  }
  return new SftpTarget(config, store, sftp, raw);
};
