import { readRegularFile } from '../core/read-file.js';
import { join } from 'node:path';
import { storeError } from '../core/errors.js';
import { VERSION } from '../core/version.js';
import type { EngineName } from '../engines/contract.js';

export const MANIFEST = 'manifest.json';
export const MANIFEST_FORMAT = 'memory-warden-snapshot/1';

export interface FileEntry {
  bytes: number;
  sha256: string;
}

/** The file in a snapshot folder that holds its holds (src/snapshot/targets/holds.ts), made with the snapshot. */
export const HOLDS_FILE = 'holds.json.gz';

/**
 * The snapshot's holds, made once when it is taken: the keyed hashes of the ids and users its SQLite copy holds,
 * what every target's upload carries and erase searches. `keyId`: the erase key they were made with. Absent in
 * older snapshots, or when the key could not be read: a push or an erase then makes them from the copy.
 */
export interface HoldsEntry extends FileEntry {
  file: typeof HOLDS_FILE;
  keyId: string;
  /**
   * HOLDS_FORMAT when the holds name what every layout's copy names (Layout.copyNames); absent in holds made before,
   * which named only the warden memory table's and mem0's ids and users (a Mastra copy's holds named nobody). The
   * file's own form is the same: older readers read both.
   */
  format?: number;
}

/** The holds' current format (HoldsEntry.format). */
export const HOLDS_FORMAT = 2;

export interface SqlitePart {
  /** File name inside the snapshot folder. */
  file: string;
  /** The store file it was copied from. */
  source: string;
  startedAt: string;
  finishedAt: string;
  /** `PRAGMA integrity_check` of the copy: only `ok` is ever published. */
  integrity: string;
  /** The source's journal mode, given back to the file on restore. */
  journalMode: string;
  /** Rows per table in the copy; `rows` is the memory table's (null for other layouts). */
  tables: Record<string, number>;
  rows: number | null;
}

export interface QdrantPart {
  collection: string;
  file: string;
  /** The server-side snapshot it was downloaded from (deleted from the server afterwards). */
  snapshot: string;
  startedAt: string;
  finishedAt: string;
  /** Qdrant's own checksum, equal to the sha256 of the downloaded file. */
  qdrantChecksum: string;
  /** Exact point count just before the snapshot was taken. */
  points: number;
}

/**
 * The store's tables as its engine's artifact (src/engines/contract.ts, EngineTables), in the folder `tables/`: what
 * a snapshot holds of a store that is a database rather than a file, in place of `sqlite`. Each of its files is in
 * the manifest's `files` too, so it is verified, encrypted and pushed like any other.
 */
export interface TablesPart {
  /** The engine it was read from and can only be restored into. */
  engine: EngineName;
  /** The artifact's folder in the snapshot folder. */
  dir: typeof TABLES_DIR;
  /** The engine's artifact format. */
  format: string;
  /** Where it was read from (`postgres schema NAME`); a restore writes into the store's configured place only. */
  source: string;
  startedAt: string;
  finishedAt: string;
  /** The one instant every table was read at, as the database saw it. */
  takenAt: string;
  /** Rows per table; `rows` is the memory table's (null when there is none). */
  tables: Record<string, number>;
  rows: number | null;
}

export const TABLES_DIR = 'tables';

/**
 * Tables of a database that hold a store's vectors apart from it (Layout.vectorTables: mem0's pgvector tables beside
 * its history file, taken together with the file's copy; Mastra's PgVector tables on another server or schema than
 * its PostgresStore tables, taken just before them), as the engine's artifact, in the folder `pgvector/`.
 */
export interface VectorTablesPart extends Omit<TablesPart, 'dir' | 'rows'> {
  dir: typeof VECTOR_TABLES_DIR;
}

export const VECTOR_TABLES_DIR = 'pgvector';

/** The store's part of a snapshot, whichever it holds: its rows, and the file names that make it up. */
export function storePart(m: Manifest): { rows: number | null; tables: Record<string, number>; startedAt: string; files: string[] } {
  if (m.sqlite) return { rows: m.sqlite.rows, tables: m.sqlite.tables, startedAt: m.sqlite.startedAt, files: [m.sqlite.file] };
  const t = m.tables!;
  return { rows: t.rows, tables: t.tables, startedAt: t.startedAt, files: Object.keys(m.files).filter((f) => f.startsWith(`${t.dir}/`)) };
}

/** Written last: its presence in a published folder means every part was verified. */
export interface Manifest {
  format: typeof MANIFEST_FORMAT;
  tool: { name: string; version: string };
  store: string;
  /** The folder's name, so a manifest copied into another folder does not make that folder a snapshot. */
  name?: string;
  /**
   * One more than the highest of the store's snapshots when this one was taken: their order, which a clock stepped
   * back or forward cannot change (folder names and times come from the clock). Absent in older snapshots.
   */
  seq?: number;
  layout: string;
  /**
   * The id of the erase key (src/erase/key.ts) the installation's state db was bound to when this snapshot was
   * taken: the erase ledger a restore of it must re-apply is that key's (src/erase/restore-ledger.ts). Absent in
   * older snapshots, or when the key could not be read.
   */
  eraseKeyId?: string;
  reason: 'scheduled' | 'pre-restore';
  startedAt: string;
  finishedAt: string;
  /**
   * Upper bound, in milliseconds, on how far apart the parts captured their store: from the first part's start to
   * the last part's finish. The agent's writes within this window may be in one part and not the other.
   */
  skewMs: number;
  /** The SQLite copy of a store that is a file; absent when `tables` holds the store. */
  sqlite?: SqlitePart;
  /** The store's tables, for a store that is a database (exactly one of `sqlite` and `tables` is there). */
  tables?: TablesPart;
  qdrant: QdrantPart[];
  /** SQLite files that hold the store's vectors (mem0's TypeScript SDK), copied as the store file is; absent before. */
  vectorFiles?: SqlitePart[];
  /** Database tables that hold the store's vectors apart from it (mem0's pgvector, Mastra's PgVector elsewhere), read at one instant; absent before. */
  vectorTables?: VectorTablesPart;
  /** sha256 and size of every file in the folder but this one and the holds. */
  files: Record<string, FileEntry>;
  holds?: HoldsEntry;
}

/** memory-warden's version, recorded in every manifest. */
export function toolVersion(): string {
  return VERSION;
}

export function readManifest(folder: string): Manifest {
  const path = join(folder, MANIFEST);
  let raw: unknown;
  try {
    raw = JSON.parse(readRegularFile(path));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw storeError(`${folder}: no readable ${MANIFEST} (${code ?? (err as Error).message}): not a complete snapshot`, err);
  }
  const m = raw as Partial<Manifest>;
  if (m.format !== MANIFEST_FORMAT || !m.sqlite === !m.tables || !Array.isArray(m.qdrant) || !m.files || typeof m.store !== 'string') {
    throw storeError(`${path}: not a memory-warden snapshot manifest (format ${JSON.stringify(m.format)})`);
  }
  if (m.holds !== undefined && (m.holds?.file !== HOLDS_FILE || typeof m.holds.keyId !== 'string' || typeof m.holds.sha256 !== 'string' || !Number.isSafeInteger(m.holds.bytes))) {
    throw storeError(`${path}: its holds entry is not one memory-warden writes`);
  }
  if (m.vectorTables && (m.vectorTables.dir !== VECTOR_TABLES_DIR || typeof m.vectorTables.engine !== 'string')) throw storeError(`${path}: its vectorTables entry is not one memory-warden writes`);
  if (m.tables && (m.tables.dir !== TABLES_DIR || typeof m.tables.engine !== 'string')) throw storeError(`${path}: its tables entry is not one memory-warden writes`);
  for (const name of Object.keys(m.files)) {
    if (name.includes('..') || name.startsWith('/') || name === MANIFEST || name === HOLDS_FILE) throw storeError(`${path}: file entry "${name}" points outside the snapshot`);
  }
  return m as Manifest;
}
