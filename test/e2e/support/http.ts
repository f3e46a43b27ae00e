export interface HttpReply {
  status: number;
  headers: Headers;
  text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  json: unknown;
}

export interface CallOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: unknown;
  timeoutMs?: number;
}

/** One HTTP request as a user's curl would make it; the whole body is read. */
export async function call(url: string, opts: CallOptions = {}): Promise<HttpReply> {
  const headers = { ...opts.headers };
  let body: string | undefined;
  if (opts.body !== undefined) {
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, { method: opts.method ?? 'GET', headers, body, signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000) });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** The X-RateLimit-* headers of a reply (null where absent). */
export function rateHeaders(reply: HttpReply): { limit: string | null; remaining: string | null; reset: string | null } {
  return {
    limit: reply.headers.get('x-ratelimit-limit'),
    remaining: reply.headers.get('x-ratelimit-remaining'),
    reset: reply.headers.get('x-ratelimit-reset'),
  };
}
