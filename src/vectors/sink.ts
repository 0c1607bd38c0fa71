/**
 * The second store's side of a delete. A memory is its SQLite row and its vectors; every delete removes the
 * vectors first (and waits for them), then the rows, so a crash in between leaves rows the next run deletes,
 * never vectors without rows. Implemented by the Qdrant store; absent when a store has no vector side.
 */
export interface VectorSink {
  /** Delete every point of these row ids in every collection; resolves once the vector store has applied it. */
  deleteForRows(rowIds: readonly string[]): Promise<void>;
}
