import type { KubeConfig } from '@kubernetes/client-node';
import { interceptors, type Dispatcher as UndiciDispatcher, type errors, type RetryHandler } from 'undici';

type Context = Parameters<KubeConfig['applySecurityAuthentication']>[0];
type Dispatcher = NonNullable<ReturnType<Context['getDispatcher']>>;

/** How many times a shed request is sent again; the last 429 then reaches the caller. */
export const SHED_RETRIES = 5;

/** The first wait before a shed request goes again, and the longest. */
export interface ShedRetryWaits {
  firstMs: number;
  longestMs: number;
}

const shedRetryWaits: ShedRetryWaits = { firstMs: 1_000, longestMs: 5_000 };

/** A Retry-After's wait in ms: seconds, or an HTTP date; 0 when absent or unreadable. */
function retryAfterMs(value: string | string[] | undefined): number {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined) return 0;
  const seconds = Number(text);
  if (!Number.isNaN(seconds)) return Math.max(0, seconds * 1_000);
  const at = Date.parse(text);
  return Number.isNaN(at) ? 0 : Math.max(0, at - Date.now());
}

/**
 * When a shed request goes again: after the longer of the server's Retry-After and a backoff
 * that starts at `firstMs` and doubles each time, at most `longestMs`, stretched by up to a
 * quarter at random. The API server's priority and fairness asks for 1 s each time, so
 * requests it shed together came back together every second and found the seats still taken:
 * in a CI run a burst of ten used up its retries within five seconds.
 */
function shedRetryPolicy({ firstMs, longestMs }: ShedRetryWaits): RetryHandler.RetryCallback {
  return (err, { state }, retry) => {
    const { statusCode, headers } = err as Partial<errors.RequestRetryError>;
    if (statusCode !== 429 || state.counter > SHED_RETRIES) {
      retry(err);
      return undefined;
    }
    const backoffMs = firstMs * 2 ** (state.counter - 1);
    const waitMs = Math.min(longestMs, Math.max(retryAfterMs(headers?.['retry-after']), backoffMs));
    // Returned so that the request's abort can cancel the wait.
    return setTimeout(() => retry(null), waitMs * (1 + Math.random() / 4));
  };
}

/** The body to send a request with again: fetch hands the dispatcher a one-time async iterable. */
async function bytesOf(body: AsyncIterable<Uint8Array | string>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/**
 * Reads a request's body before the request is sent, so that a retry can send it again.
 * client-node sends through undici's fetch, whose body the first try used up: a shed create or
 * update went again with no body, and failed as a transport error. Kubernetes bodies are
 * objects of at most a few MB.
 */
const replayableBody: UndiciDispatcher.DispatcherComposeInterceptor = (dispatch) => (options, handler) => {
  const { body } = options;
  if (body === null || body === undefined || typeof body === 'string' || body instanceof Uint8Array || !(Symbol.asyncIterator in body)) {
    return dispatch(options, handler);
  }
  bytesOf(body as AsyncIterable<Uint8Array | string>).then(
    (bytes) => dispatch({ ...options, body: bytes }, handler),
    (err: unknown) => handler.onResponseError?.(null as never, err as Error),
  );
  return true;
};

/**
 * An API server shedding load (API Priority and Fairness, or its storage still initializing
 * after a restart) answers 429 before it handles the request, so any request, a create
 * included, can be sent again, with its body (`replayableBody`). Each is, up to SHED_RETRIES
 * times (`shedRetryPolicy`). Every other answer and failure, and the last 429, reaches the
 * caller as it came: the operator's work queue and the admin operations have their own
 * handling. The interceptors in the order `Dispatcher.compose` takes them.
 */
export function retryWhenShedding(waits: ShedRetryWaits = shedRetryWaits): UndiciDispatcher.DispatcherComposeInterceptor[] {
  return [interceptors.retry({ retry: shedRetryPolicy(waits), throwOnError: false }), replayableBody];
}

const sendShedAgain = retryWhenShedding();

/**
 * client-node 2.0.1 builds a new undici Agent for every request (KubeConfig's private
 * createDispatcher), so each API call opens its own TLS connection and leaves it idle
 * in an agent of its own. Measured in the operator on 100 APIs + 1,000 Keys: ~160 ms per
 * reconcile and ~700 MiB RSS. This makes every request of this KubeConfig share one
 * agent per (cluster, user, TLS material): keep-alive connections are reused.
 * Bearer tokens travel in headers, refreshed per request as before. The shared agent also
 * sends a request the API server shed again (`retryWhenShedding`).
 */
const shared = new WeakSet<KubeConfig>();

export function shareConnections(kc: KubeConfig): KubeConfig {
  // Several operators may be handed one KubeConfig (tests): wrap it once.
  if (shared.has(kc)) return kc;
  shared.add(kc);
  const apply = kc.applySecurityAuthentication.bind(kc);
  const agents = new Map<string, { agent: Dispatcher; retrying: Dispatcher }>();
  kc.applySecurityAuthentication = async (context: Context): Promise<void> => {
    await apply(context);
    const fresh = context.getDispatcher();
    if (!fresh) return;
    const id = connectionIdentity(kc);
    let kept = agents.get(id);
    if (!kept) {
      kept = { agent: fresh, retrying: fresh.compose(sendShedAgain) };
      agents.set(id, kept);
    }
    context.setDispatcher(kept.retrying);
    if (fresh !== kept.agent) void fresh.close();
  };
  return kc;
}

/** What a connection is made with: server, trust, client identity. */
function connectionIdentity(kc: KubeConfig): string {
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  return JSON.stringify([
    cluster?.name,
    cluster?.server,
    cluster?.caData ?? cluster?.caFile,
    cluster?.skipTLSVerify,
    user?.name,
    user?.certData ?? user?.certFile,
    user?.keyData ?? user?.keyFile,
  ]);
}
