/** The package ships no types: its one export, the hash slot Redis Cluster files a key under. */
declare module 'cluster-key-slot' {
  export default function calculateSlot(key: string | Buffer): number;
}
