// The graphile-worker peer of bench/run (run by bench/peer_graphile.py with Node 22 and
// NODE_PATH=bench/.peer-node/node_modules):
//
//   node bench/peer_graphile.cjs DATABASE_URL JOBS CONCURRENCY[,CONCURRENCY...] MAX_SECONDS
//
// For each concurrency: JOBS no-op jobs added with addJobs in batches of 1,000, then
// a worker (localQueue 500, completeJobBatchDelay 0) runs them until the jobs table
// is empty. Prints one JSON line: per concurrency, the lifecycle rate (first addJobs
// -> all done) and the work rate (worker start -> all done).
"use strict";
const fs = require("fs");
const path = require("path");
const { Logger, run, makeWorkerUtils } = require("graphile-worker");
const { Pool } = require("pg");

const BATCH = 1000;
// HIPQ_BENCH_HANDSHAKE=1: print START before the timed window and DONE after it, each
// time waiting for a line on stdin, so the caller can measure CPU over exactly it
const HANDSHAKE = process.env.HIPQ_BENCH_HANDSHAKE === "1";
let stdinLines = null;
async function handshake(word) {
  if (!HANDSHAKE) return;
  if (stdinLines === null) {
    stdinLines = require("readline").createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  }
  console.log(word);
  await stdinLines.next();
}

async function remaining(pool) {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
  return rows[0].n;
}

async function once(url, pool, jobs, concurrency, maxSeconds) {
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
  await handshake("START");
  const t0 = process.hrtime.bigint();
  for (let start = 0; start < jobs; start += BATCH) {
    const specs = [];
    for (let i = start; i < Math.min(jobs, start + BATCH); i++) {
      specs.push({ identifier: "noop", payload: { n: i } });
    }
    await utils.addJobs(specs);
  }
  const tAdded = process.hrtime.bigint();
  await utils.release();
  const runner = await run({
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    taskList: { noop: async () => {} },
    preset: {
      worker: {
        connectionString: url,
        concurrentJobs: concurrency,
        maxPoolSize: concurrency + 10,
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
    logger: new Logger(() => () => {}),
  });
  const deadline = Date.now() + maxSeconds * 1000;
  let left = await remaining(pool);
  while (left > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    left = await remaining(pool);
  }
  const tDone = process.hrtime.bigint();
  await handshake("DONE");
  await runner.stop();
  const s = (a, b) => Number(b - a) / 1e9;
  const done = jobs - left;
  return {
    concurrency, jobs, succeeded: done, all_done: left === 0,
    add_s: +s(t0, tAdded).toFixed(3), work_s: +s(tAdded, tDone).toFixed(3),
    lifecycle_s: +s(t0, tDone).toFixed(3),
    add_jobs_per_s: +(jobs / s(t0, tAdded)).toFixed(1),
    work_jobs_per_s: +(done / s(tAdded, tDone)).toFixed(1),
    jobs_per_s: +(done / s(t0, tDone)).toFixed(1),
  };
}

async function main() {
  const [url, jobs, concurrencies, maxSeconds] = process.argv.slice(2);
  const pool = new Pool({ connectionString: url, max: 2 });
  const runs = [];
  try {
    for (const c of concurrencies.split(",").map(Number)) {
      runs.push(await once(url, pool, Number(jobs), c, Number(maxSeconds)));
      await pool.query("DELETE FROM graphile_worker._private_jobs");
    }
  } finally {
    await pool.end();
    if (stdinLines !== null) process.stdin.destroy();
  }
  const main = require.resolve("graphile-worker");
  const pkg = path.join(main.slice(0, main.lastIndexOf("graphile-worker") + 15), "package.json");
  const version = JSON.parse(fs.readFileSync(pkg, "utf8")).version;
  console.log(JSON.stringify({ peer: "graphile-worker", version, node: process.version, runs }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
