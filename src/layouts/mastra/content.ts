// Mastra's message content as text: format 2 (`{ format: 2, parts: [{ type: 'text', text }], content? }`), or a
// plain string from older writers. Only what a person wrote or was told: part types and ids are no one's text.

export function messageTexts(content: string): string[] {
  let v: unknown;
  try {
    v = JSON.parse(content);
  } catch {
    return [content];
  }
  if (typeof v === 'string') return [v];
  if (!v || typeof v !== 'object') return [];
  const out: string[] = [];
  const c = v as { content?: unknown; parts?: unknown };
  if (typeof c.content === 'string') out.push(c.content);
  if (Array.isArray(c.parts)) {
    for (const part of c.parts) {
      const p = part as { text?: unknown; reasoning?: unknown };
      if (typeof p?.text === 'string') out.push(p.text);
      if (typeof p?.reasoning === 'string') out.push(p.reasoning);
    }
  }
  return out;
}

/** Whether content is what Mastra can read back: JSON (format 2). */
export function parses(content: string): boolean {
  try {
    JSON.parse(content);
    return true;
  } catch {
    return false;
  }
}
