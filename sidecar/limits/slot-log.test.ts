import { describe, expect, it } from 'vitest';
import { SlotLog } from './slot-log.ts';

const contents = (log: SlotLog): [number, number][] => Array.from({ length: log.length }, (_, i) => [log.idAt(i), log.startAt(i)]);

describe('SlotLog', () => {
  it('keeps its slots in order through growth, drops from the front, removals and shrinking', () => {
    const log = new SlotLog();
    for (let id = 1; id <= 1000; id += 1) log.push(id, id * 10);
    expect(log.length).toBe(1000);
    expect(contents(log).slice(0, 2)).toEqual([[1, 10], [2, 20]]);
    log.dropFirst(990);
    expect(contents(log)).toEqual(Array.from({ length: 10 }, (_, i) => [991 + i, (991 + i) * 10]));
    log.removeAt(log.indexOf(995));
    log.setStart(log.indexOf(996), 9_951);
    expect(log.indexOf(995)).toBe(-1);
    // Pushed past the arrays' end: the few slots left move to the start of smaller arrays.
    for (let id = 1001; id <= 1100; id += 1) log.push(id, id * 10);
    expect(log.length).toBe(109);
    expect(contents(log).slice(0, 6)).toEqual([[991, 9910], [992, 9920], [993, 9930], [994, 9940], [996, 9951], [997, 9970]]);
    expect(contents(log).at(-1)).toEqual([1100, 11_000]);
    log.clear();
    expect(log.length).toBe(0);
    log.push(7, 70);
    expect(contents(log)).toEqual([[7, 70]]);
  });
});
