/**
 * The texts the digest saw memories hold (src/digest/texts.ts): for a layout that keeps only a memory's latest text
 * (Mastra's working memory), what it said at a period's start, shown as the before of a change. Memory text:
 * `erase` deletes these rows (src/erase/state.ts).
 */
export default `
CREATE TABLE digest_texts (
  store       TEXT NOT NULL,
  memory_id   TEXT NOT NULL,
  written_at  INTEGER NOT NULL,
  subject     TEXT NOT NULL,
  text        TEXT NOT NULL,
  seen_at     INTEGER NOT NULL,
  PRIMARY KEY (store, memory_id, written_at)
);
`;
