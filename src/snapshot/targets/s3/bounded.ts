import { storeError } from '../../../errors.js';

/**
 * Reading an object whose size is on record, without trusting the storage to stop: at most the recorded size is
 * passed on, and the read ends (the connection closed) as soon as one byte more arrives.
 */

/**
 * The object's bytes, at most `bytes` of them. A storage sending more (an endless stream, an object replaced by a
 * larger one) fails at the first byte past the record, after reading at most size+1 bytes; one ending early fails too.
 */
export async function* atMost(body: AsyncIterable<Uint8Array>, bytes: number, what: string): AsyncIterable<Buffer> {
  let seen = 0;
  for await (const chunk of body) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (seen + b.length > bytes) {
      if (bytes > seen) yield b.subarray(0, bytes - seen);
      // Leaving the loop destroys the response stream: nothing more is read from the socket.
      throw storeError(`${what}: the storage sent more than the ${bytes} bytes on record; stopped reading at ${bytes + 1}`);
    }
    seen += b.length;
    yield b;
  }
  if (seen < bytes) throw storeError(`${what}: the storage sent ${seen} bytes, ${bytes} on record`);
}

/** The length a response declares, checked before a byte is read: a storage announcing another size is not read. */
export function declaredLengthProblem(declared: number | undefined, bytes: number): string | undefined {
  return declared !== undefined && declared !== bytes ? `the storage declares ${declared} bytes, ${bytes} on record` : undefined;
}
