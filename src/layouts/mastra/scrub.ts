import { existsSync, readFileSync } from 'node:fs';
import { immediate, quoteId, type LibDb } from './files.js';

// Erase's last steps on a Mastra file, in place of the VACUUM libsql cannot do safely: zero every free page, rewrite
// the tables whose pages still hold an erased text in their free space, truncate the WAL, read the bytes back.

const WIPE = '_memory_warden_wipe';
const CHUNK = 16 * 1024 * 1024;

/**
 * Pages freed before this erase (by Mastra's own deletes, which never scrub) keep their old bytes: a blob of zeros
 * as large as the freelist takes those pages over, and dropping it (secure_delete on) gives them back zeroed.
 */
export function wipeFreePages(db: LibDb): void {
  const pragma = (name: string) => Number(Object.values((db.pragma(name) as Record<string, unknown>[])[0] ?? {})[0] ?? 0);
  const bytes = pragma('freelist_count') * pragma('page_size');
  if (bytes === 0) return;
  immediate(db, () => {
    db.exec(`CREATE TABLE ${WIPE} (b BLOB)`);
    for (let left = bytes; left > 0; left -= CHUNK) db.prepare(`INSERT INTO ${WIPE} VALUES (zeroblob(?))`).run(Math.min(CHUNK, left));
  });
  immediate(db, () => db.exec(`DROP TABLE ${WIPE}`));
}

/** checkpoint(TRUNCATE): the deletes' pages into the file, the WAL (and every old frame in it) emptied. */
export function truncateWal(db: LibDb): boolean {
  const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number; log: number }[];
  return r !== undefined && r.busy === 0 && r.log <= 0;
}

/** How many of the texts a file or its WAL still holds, as written or JSON-escaped (the erase's own byte check). */
export function textsLeft(paths: readonly string[], texts: readonly string[]): number {
  const files = paths.flatMap((p) => [p, `${p}-wal`]).filter((p) => existsSync(p)).map((p) => readFileSync(p));
  return texts.filter((t) => {
    const forms = [...new Set([t, JSON.stringify(t).slice(1, -1)])].map((s) => Buffer.from(s, 'utf8'));
    return files.some((b) => forms.some((f) => b.includes(f)));
  }).length;
}

/** The tables owning the pages of `path` that still hold one of the texts (dbstat); null when dbstat is missing. */
export function tablesHolding(db: LibDb, path: string, texts: readonly string[]): string[] | null {
  const b = readFileSync(path);
  const size = Number(Object.values((db.pragma('page_size') as Record<string, unknown>[])[0] ?? {})[0]);
  const pages = new Set<number>();
  for (const t of texts) {
    for (const form of new Set([t, JSON.stringify(t).slice(1, -1)])) {
      for (let at = b.indexOf(form); at >= 0; at = b.indexOf(form, at + 1)) pages.add(Math.floor(at / size) + 1);
    }
  }
  if (pages.size === 0) return [];
  try {
    const owners = db.prepare(`SELECT DISTINCT s.name AS name FROM dbstat s JOIN sqlite_schema m ON m.name = s.name AND m.type = 'table' WHERE s.pageno IN (SELECT value FROM json_each(?))`).all(JSON.stringify([...pages])) as { name: string }[];
    return owners.map((o) => o.name);
  } catch {
    return null;
  }
}

/**
 * Every row of `table` deleted and written back, in one transaction with secure_delete on: each page it had is freed
 * zeroed and the rows land on fresh ones, so the free space inside its pages (where Mastra's own deletes left the
 * cells' bytes) is gone. Through libsql, so a vector table's index follows. The copy is held in memory, not a file.
 */
export function rewriteTable(db: LibDb, table: string): void {
  const cols = (db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as { name: string }[]).map((c) => quoteId(c.name)).join(', ');
  const t = quoteId(table);
  db.pragma('temp_store = MEMORY');
  immediate(db, () => {
    db.exec(`CREATE TEMP TABLE _memory_warden_copy AS SELECT rowid AS _rowid, ${cols} FROM ${t}`);
    // A WHERE clause: SQLite's truncate shortcut would bypass the vector index's own delete.
    db.exec(`DELETE FROM ${t} WHERE rowid = rowid`);
    db.exec(`INSERT INTO ${t} (rowid, ${cols}) SELECT _rowid, ${cols} FROM temp._memory_warden_copy ORDER BY _rowid`);
    db.exec('DROP TABLE temp._memory_warden_copy');
  });
}
