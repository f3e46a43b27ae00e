export { waitFor } from '../../support/wait-for.ts';

/** A loopback port free at the time of asking: the harness's own. */
export { freePort } from '../../harness/ports.ts';
