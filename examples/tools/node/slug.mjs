// The logic both Node tools share: a URL slug from a text.

/** Thrown for input the tool cannot use: its message is shown to the agent. */
export class ToolInputError extends Error {}

/** "Hello, World!" -> "hello-world" (accents dropped, any run of other characters -> `separator`). */
export function slugify({ text, separator = '-' }) {
  const slug = text
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean)
    .join(separator);
  if (!slug) {
    throw new ToolInputError('nothing to make a slug of: the text has no letters or digits');
  }
  return { slug };
}

/** Waits `seconds` (only to try the tool's timeout). */
export function delay(seconds = 0) {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}
