import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';

/** An info-level logger whose JSON lines land in `lines`, so tests can assert what was (and was not) logged. */
export function collectingLogger(lines: string[]): Logger {
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return pino({ level: 'info' }, stream);
}
