/**
 * This machine's record of the multipart uploads it started and has not finished, one small file each, written
 * before the upload exists: what lets the next run abort a killed upload by id.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { storeError } from '../../../core/errors.js';
import { readRegularFile } from '../../../core/read-file.js';
import { DIR_MODE, FILE_MODE, fsyncPath } from '../../layout.js';
import { expandTilde } from '../types.js';
import type { S3TargetConfig } from './schema.js';

export const UPLOAD_JOURNAL_FORMAT = 'memory-warden-s3-upload/1';

/** Which storage location an entry belongs to: endpoint, bucket and the target's key prefix for one store. */
export interface UploadPlace {
  endpoint: string;
  bucket: string;
  base: string;
}

export interface UploadEntry extends UploadPlace {
  format: typeof UPLOAD_JOURNAL_FORMAT;
  /** The object's full key. */
  key: string;
  /** Absent until the storage answered CreateMultipartUpload (a kill in between leaves it absent). */
  uploadId?: string;
  startedAt: string;
  /** The entry's file, for `end`. */
  file: string;
}

const samePlace = (a: UploadPlace, b: UploadPlace) => a.endpoint === b.endpoint && a.bucket === b.bucket && a.base === b.base;

export class UploadJournal {
  constructor(private readonly dir: string, private readonly place: UploadPlace) {}

  /** Record that an upload of `key` is about to be created; durable before the request is sent. */
  begin(key: string, now: Date = new Date()): UploadEntry {
    const entry: UploadEntry = { format: UPLOAD_JOURNAL_FORMAT, ...this.place, key, startedAt: now.toISOString(), file: join(this.dir, `${randomBytes(12).toString('hex')}.json`) };
    this.write(entry);
    return entry;
  }

  /** The storage named the upload: from now on it can be aborted by id. */
  started(entry: UploadEntry, uploadId: string): void {
    entry.uploadId = uploadId;
    this.write(entry);
  }

  /** The upload is complete or aborted: nothing left to clean. */
  end(entry: UploadEntry): void {
    rmSync(entry.file, { force: true });
  }

  /** Unfinished uploads of this place. An entry that cannot be read is a failure naming its file, never skipped. */
  pending(): UploadEntry[] {
    let names: string[];
    try {
      names = readdirSync(this.dir).filter((n) => /^[0-9a-f]{24}\.json$/.test(n));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw storeError(`read the S3 upload journal ${this.dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, err);
    }
    return names.map((n) => this.read(join(this.dir, n))).filter((e) => samePlace(e, this.place));
  }

  private read(file: string): UploadEntry {
    let e: Partial<UploadEntry>;
    try {
      e = JSON.parse(readRegularFile(file, 64 * 1024)) as Partial<UploadEntry>;
    } catch (err) {
      const why = err instanceof SyntaxError ? err.message : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
      throw storeError(`read S3 upload journal entry ${file}: ${why}; delete it once no upload it names is needed`, err);
    }
    const text = (v: unknown) => typeof v === 'string' && v.length > 0;
    if (e.format !== UPLOAD_JOURNAL_FORMAT || !text(e.endpoint) || !text(e.bucket) || typeof e.base !== 'string' || !text(e.key)
      || !e.key!.startsWith(e.base) || (e.uploadId !== undefined && !text(e.uploadId))) {
      throw storeError(`read S3 upload journal entry ${file}: not a memory-warden S3 upload record (format ${JSON.stringify(e.format)})`);
    }
    return { ...(e as UploadEntry), file };
  }

  /** Atomically: a temporary file, fsynced, renamed over the entry, the folder fsynced. 0600. */
  private write(entry: UploadEntry): void {
    const { file, ...record } = entry;
    const tmp = `${file}.tmp-${process.pid}`;
    try {
      mkdirSync(this.dir, { recursive: true, mode: DIR_MODE });
      writeFileSync(tmp, JSON.stringify(record) + '\n', { mode: FILE_MODE });
      fsyncPath(tmp);
      renameSync(tmp, file);
      fsyncPath(this.dir);
    } catch (err) {
      // Not recorded, not started: an upload this machine could not abort after a kill is never begun.
      throw storeError(`record the S3 upload of ${entry.key} in ${this.dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, err);
    }
  }
}

/** The journal of one S3 target's uploads for one store: its place is the endpoint, bucket and `<prefix><store>/`. */
export function uploadJournalFor(config: S3TargetConfig, store: string): UploadJournal {
  const place = { endpoint: config.endpoint ?? `aws:${config.region}`, bucket: config.bucket, base: `${config.prefix}${store}/` };
  return new UploadJournal(expandTilde(config.uploadJournalDir), place);
}
