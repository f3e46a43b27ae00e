/*
 * The bench's load generator (test/bench/load-generator.ts runs it; README.md#benchmarks).
 *
 * Open loop: requests are due on a fixed schedule, `rate` per second, whether or not earlier
 * ones have answered; each one's latency runs from the moment it was due, so a server pause
 * counts against every request due during it (a closed loop would wait, and hide it).
 * Closed loop (RATE `closed`): each connection sends its next request as soon as the last one
 * answered, for the duration, so the server is kept at its maximum; latency runs from the send.
 * It is C, one thread on epoll, because the generator shares the machine's cores with the
 * servers it measures: a generator in Node spent as much CPU per request as the proxies did
 * (so less was left for them) and fell tens of milliseconds behind its own schedule, which
 * then showed as the servers' tail.
 *
 * Beside the load, a meter thread at the priority the servers run at (the generator's own, before
 * it raises it) sleeps 1 ms at a time and records how late each wake-up came: what the machine
 * itself makes any process wait for a core during the run (CPU taken by the others, a virtual
 * CPU the host did not run). A server's latency cannot be steadier than that; the tail suite
 * reports it beside each row.
 *
 * HTTP/1.1 GET on keep-alive connections, one request at a time per connection, responses
 * framed by Content-Length or chunked. A connection that is refused or lost fails the request
 * it carried (counted as an error) and is opened again for the next one.
 *
 *   load-generator [--rotate N] URL RATE|closed DURATION_MS CONNECTIONS ['Name: value' ...]
 *
 * prints one JSON object (the fields of LoadResult in load-generator.ts) on stdout. With
 * `--rotate N`, the requests take turns among N variants: in the i-th, every `{i}` of a header
 * reads i (0 to N-1), so a run can spread over N API keys as a fleet of clients does.
 *
 *   load-generator meter DURATION_MS
 *
 * runs the meter alone, sending nothing (the machine before and after a bench run), and prints
 * its fields (WakeLateness in load-generator.ts).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* Requests still unanswered this long after the last one was due count as errors. */
#define GRACE_NS (30ull * 1000000000ull)
#define TIMER_TAG UINT64_MAX
/*
 * The generator's scheduling priority when it may raise it (as root): ahead of the servers it
 * measures, so its own waits for a core do not read as their latency.
 */
#define GENERATOR_NICE (-10)
/* A closed loop's pause after a failed request, before it sends again. */
#define RETRY_PAUSE_NS (10ull * 1000000ull)
/* The meter's sleep between wake-ups. */
#define METER_PERIOD_NS 1000000ull

enum conn_state { CLOSED, CONNECTING, BUSY, IDLE };

struct conn {
  int fd;
  enum conn_state state;
  int wants_out;
  uint64_t due;
  size_t sent;
  const char *request; /* the variant this connection is sending */
  size_t request_len;
  char *buf;
  size_t len, cap;
};

static struct {
  struct addrinfo *addr;
  char *requests;        /* the variants, one after another */
  size_t *request_starts; /* variant i is requests[request_starts[i] .. request_starts[i + 1]) */
  uint64_t nrequests, sequence;
  double rate;
  int closed;       /* closed loop: no schedule, a connection sends again when answered */
  uint64_t total;   /* open loop: the requests of the schedule */
  uint64_t start, end; /* closed loop: no request is sent after `end` */
  uint64_t resume_at;  /* closed loop: no request is sent before it, after a failure */
  int epoll;
  struct conn *conns;
  int nconns;
  int *free_conns; /* IDLE or CLOSED connections, as a stack */
  int nfree;
  uint64_t next;    /* the next request to send */
  uint64_t noticed; /* requests the generator has seen come due */
  uint64_t settled, answered, non2xx, errors, max_lag;
  uint64_t *latencies;
  uint64_t latencies_cap;
} g;

/* The wake-up meter: lateness of each wake in ns, filled by its thread until `stop`. */
static struct {
  uint64_t *late;
  uint64_t cap, n;
  int nice;
  atomic_int stop;
} meter;

static void die(const char *what) {
  fprintf(stderr, "load-generator: %s: %s\n", what, errno ? strerror(errno) : "invalid");
  exit(2);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t due_at(uint64_t i) { return g.start + (uint64_t)((double)i * 1e9 / g.rate); }

static void *run_meter(void *unused) {
  (void)unused;
  /* The kernel's default 50 µs timer slack would read as lateness on an idle machine. */
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  errno = 0;
  meter.nice = getpriority(PRIO_PROCESS, 0);
  uint64_t due = now_ns() + METER_PERIOD_NS;
  while (!atomic_load(&meter.stop) && meter.n < meter.cap) {
    struct timespec at = {.tv_sec = (time_t)(due / 1000000000ull), .tv_nsec = (long)(due % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
    }
    uint64_t woke = now_ns();
    meter.late[meter.n++] = woke - due;
    /* From this wake, not the missed schedule: one stall is one late wake-up, not a run of them. */
    due = woke + METER_PERIOD_NS;
  }
  return NULL;
}

static void watch(struct conn *c, int op, int out) {
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u64 = (uint64_t)(c - g.conns)};
  if (epoll_ctl(g.epoll, op, c->fd, &ev) != 0) die("epoll_ctl");
  c->wants_out = out;
}

static void release(struct conn *c) { g.free_conns[g.nfree++] = (int)(c - g.conns); }

static void close_conn(struct conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->state = CLOSED;
  c->len = 0;
}

static void fail(struct conn *c) {
  g.errors++;
  /* A closed loop would otherwise retry a refusing server as fast as it refuses. */
  if (g.closed) g.resume_at = now_ns() + RETRY_PAUSE_NS;
  g.settled++;
  close_conn(c);
  release(c);
}

static void answer(struct conn *c, int status) {
  if (g.answered == g.latencies_cap) {
    g.latencies_cap *= 2;
    g.latencies = realloc(g.latencies, g.latencies_cap * sizeof *g.latencies);
    if (g.latencies == NULL) die("realloc");
  }
  g.latencies[g.answered++] = now_ns() - c->due;
  if (status < 200 || status > 299) g.non2xx++;
  g.settled++;
  c->state = IDLE;
  c->len = 0;
  release(c);
}

static void write_request(struct conn *c) {
  while (c->sent < c->request_len) {
    ssize_t n = send(c->fd, c->request + c->sent, c->request_len - c->sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN) {
        if (!c->wants_out) watch(c, EPOLL_CTL_MOD, 1);
        return;
      }
      fail(c);
      return;
    }
    c->sent += (size_t)n;
  }
  if (c->wants_out) watch(c, EPOLL_CTL_MOD, 0);
}

static void start_request(struct conn *c, uint64_t due) {
  uint64_t variant = g.sequence++ % g.nrequests;
  c->request = g.requests + g.request_starts[variant];
  c->request_len = g.request_starts[variant + 1] - g.request_starts[variant];
  c->due = due;
  c->sent = 0;
  c->len = 0;
  if (c->state == IDLE) {
    c->state = BUSY;
    write_request(c);
    return;
  }
  c->fd = socket(g.addr->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) die("socket");
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(c->fd, g.addr->ai_addr, g.addr->ai_addrlen) == 0) {
    c->state = BUSY;
    watch(c, EPOLL_CTL_ADD, 0);
    write_request(c);
  } else if (errno == EINPROGRESS) {
    c->state = CONNECTING;
    watch(c, EPOLL_CTL_ADD, 1);
  } else {
    fail(c);
  }
}

/*
 * Sends what is due while connections are free; what finds none waits for the next one to
 * free. In a closed loop every free connection sends at once, until the end.
 */
static void dispatch(void) {
  uint64_t t = now_ns();
  if (g.closed) {
    if (t < g.resume_at) return;
    /* Only the connections free now: one that fails at once waits for the next turn, not a spin. */
    for (int free_now = g.nfree; t < g.end && free_now > 0; free_now--) start_request(&g.conns[g.free_conns[--g.nfree]], t);
    return;
  }
  while (g.noticed < g.total && due_at(g.noticed) <= t) {
    uint64_t lag = t - due_at(g.noticed);
    if (lag > g.max_lag) g.max_lag = lag;
    g.noticed++;
  }
  while (g.next < g.noticed && g.nfree > 0) {
    struct conn *c = &g.conns[g.free_conns[--g.nfree]];
    start_request(c, due_at(g.next));
    g.next++;
  }
}

/*
 * The length of the whole response at the start of `b`: 0 while incomplete, -1 when it cannot
 * be framed. `closes` is set when the server said it ends the connection after it: a request
 * sent on it meanwhile would meet the close and fail.
 */
static long response_length(const char *b, size_t n, int *status, int *closes) {
  const char *end = memmem(b, n, "\r\n\r\n", 4);
  if (end == NULL) return 0;
  if (n < 12 || memcmp(b, "HTTP/1.", 7) != 0) return -1;
  *status = atoi(b + 9);
  size_t head = (size_t)(end - b) + 4;
  long content_length = -1;
  int chunked = 0;
  for (const char *line = memchr(b, '\n', head) + 1; line < end;) {
    const char *eol = memchr(line, '\r', (size_t)(end - line) + 1);
    if (eol == NULL) return -1;
    if (strncasecmp(line, "content-length:", 15) == 0) content_length = strtol(line + 15, NULL, 10);
    if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
      for (const char *p = line + 18; p + 7 <= eol; p++)
        if (strncasecmp(p, "chunked", 7) == 0) chunked = 1;
    }
    if (strncasecmp(line, "connection:", 11) == 0) {
      for (const char *p = line + 11; p + 5 <= eol; p++)
        if (strncasecmp(p, "close", 5) == 0) *closes = 1;
    }
    line = eol + 2;
  }
  if (*status == 204 || *status == 304) return (long)head;
  if (!chunked) return content_length < 0 ? -1 : (n >= head + (size_t)content_length ? (long)(head + (size_t)content_length) : 0);
  size_t pos = head;
  for (;;) {
    const char *eol = memmem(b + pos, n - pos, "\r\n", 2);
    if (eol == NULL) return 0;
    unsigned long size = strtoul(b + pos, NULL, 16);
    pos = (size_t)(eol - b) + 2;
    if (size == 0) break;
    if (n < pos + size + 2) return 0;
    pos += size + 2;
  }
  for (;;) { /* trailer fields, up to the empty line */
    const char *eol = memmem(b + pos, n - pos, "\r\n", 2);
    if (eol == NULL) return 0;
    if (eol == b + pos) return (long)(pos + 2);
    pos = (size_t)(eol - b) + 2;
  }
}

static void readable(struct conn *c) {
  int ended = 0;
  for (;;) {
    if (c->cap - c->len < 4096) {
      c->cap = c->cap ? c->cap * 2 : 16384;
      c->buf = realloc(c->buf, c->cap);
      if (c->buf == NULL) die("realloc");
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n > 0) {
      c->len += (size_t)n;
      continue;
    }
    /* End of stream or an error: what arrived before it still counts. */
    ended = !(n < 0 && errno == EAGAIN);
    break;
  }
  if (c->state == BUSY) {
    int status = 0, closes = 0;
    long length = response_length(c->buf, c->len, &status, &closes);
    if (length < 0 || (length == 0 && ended)) {
      fail(c);
      return;
    }
    if (length > 0) {
      answer(c, status);
      if (closes) ended = 1;
    }
  }
  /* Nothing is owed on an idle connection; one the server ended is opened again when next needed. */
  if (c->state == IDLE) c->len = 0;
  if (ended && c->state != CLOSED) close_conn(c);
}

static void on_event(struct epoll_event *ev) {
  struct conn *c = &g.conns[ev->data.u64];
  if (c->state == CONNECTING) {
    int err = 0;
    socklen_t len = sizeof err;
    if ((ev->events & (EPOLLERR | EPOLLHUP)) || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      fail(c);
      return;
    }
    c->state = BUSY;
    write_request(c);
    return;
  }
  if (c->state == BUSY && (ev->events & EPOLLOUT) && c->sent < c->request_len) write_request(c);
  if (c->state != CLOSED && (ev->events & (EPOLLIN | EPOLLERR | EPOLLHUP))) readable(c);
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The p-th percentile of `n` sorted ns figures, in µs. */
static uint64_t percentile_us(const uint64_t *sorted, uint64_t n, double p) {
  if (n == 0) return 0;
  uint64_t rank = (uint64_t)((p / 100.0) * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  return (sorted[rank - 1] + 500) / 1000;
}

/* Appends `header` to `out` with every `{i}` read as `variant`; returns the bytes written. */
static size_t expand_header(char *out, const char *header, uint64_t variant) {
  size_t n = 0;
  for (const char *p = header; *p;) {
    if (strncmp(p, "{i}", 3) == 0) {
      n += (size_t)sprintf(out + n, "%llu", (unsigned long long)variant);
      p += 3;
    } else {
      out[n++] = *p++;
    }
  }
  memcpy(out + n, "\r\n", 2);
  return n + 2;
}

static void build_requests(const char *url, char **headers, int nheaders) {
  if (strncmp(url, "http://", 7) != 0) {
    errno = 0;
    die("only http:// URLs");
  }
  const char *authority = url + 7;
  const char *slash = strchr(authority, '/');
  const char *path = slash ? slash : "/";
  size_t alen = slash ? (size_t)(slash - authority) : strlen(authority);
  char host[256], port[16] = "80";
  if (alen >= sizeof host) die("host");
  memcpy(host, authority, alen);
  host[alen] = 0;
  char *colon = strrchr(host, ':');
  if (colon) {
    snprintf(port, sizeof port, "%s", colon + 1);
    *colon = 0;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  if (getaddrinfo(host, port, &hints, &g.addr) != 0) die("getaddrinfo");
  /* A `{i}` (3 bytes) reads as at most 20 digits. */
  size_t each = strlen(path) + alen + 64;
  for (int i = 0; i < nheaders; i++) each += strlen(headers[i]) * 7 + 2;
  g.requests = malloc(each * g.nrequests);
  g.request_starts = malloc((g.nrequests + 1) * sizeof *g.request_starts);
  if (!g.requests || !g.request_starts) die("malloc");
  size_t n = 0;
  for (uint64_t v = 0; v < g.nrequests; v++) {
    g.request_starts[v] = n;
    n += (size_t)sprintf(g.requests + n, "GET %s HTTP/1.1\r\nHost: %.*s\r\n", path, (int)alen, authority);
    for (int i = 0; i < nheaders; i++) n += expand_header(g.requests + n, headers[i], v);
    memcpy(g.requests + n, "\r\n", 2);
    n += 2;
  }
  g.request_starts[g.nrequests] = n;
}

static void print_wake_lateness(void) {
  qsort(meter.late, meter.n, sizeof *meter.late, by_value);
  printf("\"wakeLateMicros\":{\"p50\":%llu,\"p99\":%llu,\"p99_9\":%llu,\"max\":%llu},\"wakes\":%llu,\"meterNice\":%d",
         (unsigned long long)percentile_us(meter.late, meter.n, 50), (unsigned long long)percentile_us(meter.late, meter.n, 99),
         (unsigned long long)percentile_us(meter.late, meter.n, 99.9), (unsigned long long)percentile_us(meter.late, meter.n, 100),
         (unsigned long long)meter.n, meter.nice);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "meter") == 0) {
    double duration_ms = strtod(argv[2], NULL);
    errno = 0;
    if (!(duration_ms >= 1)) die("DURATION_MS must be at least 1");
    meter.cap = (uint64_t)duration_ms;
    meter.late = malloc(meter.cap * sizeof *meter.late);
    if (!meter.late) die("malloc");
    run_meter(NULL);
    printf("{");
    print_wake_lateness();
    printf("}\n");
    return 0;
  }
  g.nrequests = 1;
  if (argc > 2 && strcmp(argv[1], "--rotate") == 0) {
    long long variants = atoll(argv[2]);
    errno = 0;
    if (variants < 1) die("--rotate N must be at least 1");
    g.nrequests = (uint64_t)variants;
    argc -= 2;
    argv += 2;
  }
  if (argc < 5) {
    fprintf(stderr, "usage: load-generator [--rotate N] URL RATE|closed DURATION_MS CONNECTIONS ['Name: value' ...]\n");
    return 2;
  }
  build_requests(argv[1], argv + 5, argc - 5);
  double duration_ms = strtod(argv[3], NULL);
  /* Started before the generator raises its own priority (per thread on Linux), so it keeps the servers'. */
  meter.cap = (uint64_t)(duration_ms > 0 ? duration_ms : 0) + 1000;
  meter.late = malloc(meter.cap * sizeof *meter.late);
  pthread_t meter_thread;
  if (!meter.late || pthread_create(&meter_thread, NULL, run_meter, NULL) != 0) die("meter");
  /* Unprivileged, the priority stays as it was; the result says which. */
  (void)setpriority(PRIO_PROCESS, 0, GENERATOR_NICE);
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0);
  g.closed = strcmp(argv[2], "closed") == 0;
  g.rate = g.closed ? 1 : strtod(argv[2], NULL);
  g.nconns = atoi(argv[4]);
  errno = 0;
  if (!(g.rate > 0) || !(duration_ms > 0) || g.nconns < 1) die("RATE, DURATION_MS and CONNECTIONS must be positive");
  g.total = g.closed ? 0 : (uint64_t)(g.rate * duration_ms / 1000.0 + 0.5);
  g.latencies_cap = g.total ? g.total : 65536;
  g.latencies = malloc(g.latencies_cap * sizeof *g.latencies);
  g.conns = calloc((size_t)g.nconns, sizeof *g.conns);
  g.free_conns = malloc((size_t)g.nconns * sizeof *g.free_conns);
  if (!g.latencies || !g.conns || !g.free_conns) die("malloc");
  for (int i = g.nconns - 1; i >= 0; i--) {
    g.conns[i].fd = -1;
    g.free_conns[g.nfree++] = i;
  }
  g.epoll = epoll_create1(EPOLL_CLOEXEC);
  int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (g.epoll < 0 || timer < 0) die("epoll or timerfd");
  struct epoll_event tev = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
  if (epoll_ctl(g.epoll, EPOLL_CTL_ADD, timer, &tev) != 0) die("epoll_ctl timer");

  g.start = now_ns();
  g.end = g.start + (uint64_t)(duration_ms * 1e6);
  uint64_t deadline = (g.closed ? g.end : due_at(g.total)) + GRACE_NS, armed = 0;
  struct epoll_event events[256];
  /* A closed loop runs until the end and then until what is in flight has answered. */
  while ((g.closed ? now_ns() < g.end || g.nfree < g.nconns : g.settled < g.total) && now_ns() < deadline) {
    dispatch();
    /* Wake when the next request comes due (its connection may be free by then). */
    if (!g.closed && g.noticed < g.total && due_at(g.noticed) != armed) {
      armed = due_at(g.noticed);
      struct itimerspec at = {.it_value = {.tv_sec = (time_t)(armed / 1000000000ull), .tv_nsec = (long)(armed % 1000000000ull)}};
      if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL) != 0) die("timerfd_settime");
    }
    int n = epoll_wait(g.epoll, events, 256, g.closed ? (int)(RETRY_PAUSE_NS / 1000000ull) : 100);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int i = 0; i < n; i++) {
      if (events[i].data.u64 == TIMER_TAG) {
        uint64_t expirations;
        if (read(timer, &expirations, sizeof expirations) < 0 && errno != EAGAIN) die("read timerfd");
      } else {
        on_event(&events[i]);
      }
    }
  }
  /* Whatever is still unanswered after the grace period failed. */
  g.errors += g.closed ? (uint64_t)(g.nconns - g.nfree) : g.total - g.settled;
  /* A closed loop reports the rate it met, over the time until its last answer. */
  if (g.closed) g.rate = (double)g.answered * 1e9 / (double)(now_ns() - g.start);
  atomic_store(&meter.stop, 1);
  if (pthread_join(meter_thread, NULL) != 0) die("pthread_join");
  qsort(g.latencies, g.answered, sizeof *g.latencies, by_value);
  printf("{\"answered\":%llu,\"rate\":%.10g,\"latencyMicros\":{\"p50\":%llu,\"p99\":%llu,\"p99_9\":%llu,\"max\":%llu},"
         "\"non2xx\":%llu,\"errors\":%llu,\"maxSendLagMicros\":%llu,\"nice\":%d,",
         (unsigned long long)g.answered, g.rate, (unsigned long long)percentile_us(g.latencies, g.answered, 50),
         (unsigned long long)percentile_us(g.latencies, g.answered, 99), (unsigned long long)percentile_us(g.latencies, g.answered, 99.9),
         (unsigned long long)percentile_us(g.latencies, g.answered, 100), (unsigned long long)g.non2xx, (unsigned long long)g.errors,
         (unsigned long long)((g.max_lag + 500) / 1000), nice);
  print_wake_lateness();
  printf("}\n");
  return 0;
}
