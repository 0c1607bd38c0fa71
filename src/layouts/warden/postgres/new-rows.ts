import type { NewRows, NewRowsOptions, PostgresStoreHandle } from '../../contract.js';
import { newRowsOf } from '../new-rows.js';
import { canon } from './decision.js';

/** Rows fetched from the cursor at a time: a day's rows pass through, a page of them in memory. */
const PAGE = 2000;

/** An instant as a timestamptz literal (written by toISOString: digits and separators only). */
function instantLiteral(ms: number): string {
  const iso = new Date(ms).toISOString();
  if (!/^[+-]?\d{4,6}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(iso)) throw new RangeError(`not an instant: ${ms}`);
  return `'${iso}'::timestamptz`;
}

/**
 * The digest's new rows on PostgreSQL, as on SQLite (src/layouts/warden/new-rows.ts): rows whose created_at falls in
 * [start, end), newest first, then by id in byte order (COLLATE "C", SQLite's BINARY), their times as canonical text.
 * Every row of the period passes the look-twice rules once, through a cursor in one read-only transaction (one
 * snapshot), so both counts are exact while only a page and the kept rows are in memory.
 */
export async function newRowsPg(store: PostgresStoreHandle, { period, maxRows, lookTwice }: NewRowsOptions): Promise<NewRows> {
  const rows = newRowsOf(maxRows, lookTwice);
  const client = await store.pg.connect();
  try {
    await client.query('BEGIN READ ONLY');
    await client.query(`DECLARE mw_new_rows NO SCROLL CURSOR FOR
      SELECT id, subject, fact, source, ${canon('created_at')}, ${canon('expires_at')} FROM ${store.schema}.memory
      WHERE created_at >= ${instantLiteral(period.start)} AND created_at < ${instantLiteral(period.end)}
      ORDER BY created_at DESC, id COLLATE "C" DESC`);
    for (;;) {
      const page = await client.query<unknown[]>({ text: `FETCH ${PAGE} FROM mw_new_rows`, rowMode: 'array' });
      for (const r of page.rows) rows.add(r);
      if (page.rows.length < PAGE) break;
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw store.pg.explain(err, 'digest: new rows');
  } finally {
    client.release();
  }
  return rows.result();
}
