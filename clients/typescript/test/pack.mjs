// npm run test:pack: the package as a user gets it. npm pack (prepack
// builds it), the tarball's files, npm install of the tarball in a project
// of its own, and a lease taken from a real leasemgr through `import` (ESM)
// and through `require` (CommonJS), each reaching its own build; then the
// declarations each form resolves to, checked by tsc. go test
// ./clients/typescript/ packs the package once and names the tarball in
// SLOTLEASE_PACKED_TGZ; without it this test packs it itself. Not in
// `npm test`'s glob: it takes a minute or two of a loaded machine, over
// that suite's per-file timeout.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import * as local from "../dist/esm/index.js";
import { Manager } from "./harness.mjs";

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const scratch = mkdtempSync(join(tmpdir(), "slotlease-ts-pack-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const quiet = { ...process.env, NO_UPDATE_NOTIFIER: "1", npm_config_update_notifier: "false" };

/** Runs a command; its stdout, or a failure with all it printed. */
function sh(cmd, args, cwd) {
  const started = performance.now();
  try {
    return execFileSync(cmd, args, { cwd, env: quiet, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
  } catch (err) {
    assert.fail(`${cmd} ${args.join(" ")} (in ${cwd}): ${err.message}\n${err.stdout ?? ""}${err.stderr ?? ""}`);
  } finally {
    console.log(`# ${[cmd, ...args.slice(0, 2)].map((a) => basename(a)).join(" ")}: ${((performance.now() - started) / 1000).toFixed(1)}s`);
  }
}

function tarball() {
  if (process.env.SLOTLEASE_PACKED_TGZ) return process.env.SLOTLEASE_PACKED_TGZ;
  const dest = join(scratch, "pack");
  mkdirSync(dest);
  sh(npm, ["pack", "--pack-destination", dest], pkgDir);
  const [tgz] = readdirSync(dest).filter((f) => f.endsWith(".tgz"));
  assert.ok(tgz, `npm pack wrote no tarball in ${dest}`);
  return join(dest, tgz);
}

/** Runs a Node.js script with the manager's environment; its stdout as JSON. */
async function runScript(mgr, script) {
  const p = mgr.nodeScript(script);
  const { code, signal } = await p.exit(60000);
  assert.equal(code, 0, `node ${script} exited ${code ?? signal}:\n${p.out}`);
  const last = p.out.trim().split("\n").pop();
  return JSON.parse(last);
}

// Both scripts take one slot of gpu, say the lease's token, where the
// package resolved to and what it exports.
const esmScript = `
import * as api from "@slotlease/client";
const client = await api.connect();
const token = await client.withLease("gpu", { slots: 1 }, (lease) => lease.token);
await client.close();
console.log(JSON.stringify({
  resolved: import.meta.resolve("@slotlease/client"),
  exports: Object.keys(api).sort(),
  token,
  lost: new api.LeaseLostError("x", new Error("gone")).message,
}));
`;
const cjsScript = `
const api = require("@slotlease/client");
(async () => {
  const client = await api.connect();
  const token = await client.withLease("gpu", { slots: 1 }, (lease) => lease.token);
  await client.close();
  console.log(JSON.stringify({
    resolved: require.resolve("@slotlease/client"),
    exports: Object.keys(api).sort(),
    token,
    lost: new api.LeaseLostError("x", new Error("gone")).message,
  }));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
`;
// What a TypeScript user writes in an ES module and in a CommonJS one.
const mts = `
import { connect, type Client, type Lease } from "@slotlease/client";
export async function slot(): Promise<number> {
  const client: Client = await connect();
  return client.withLease("gpu", { slots: 1 }, (lease: Lease) => lease.token);
}
`;
const cts = `
import slotlease = require("@slotlease/client");
export async function slot(): Promise<number> {
  const client: slotlease.Client = await slotlease.connect();
  return client.withLease("gpu", { slots: 1 }, (lease: slotlease.Lease) => lease.token);
}
`;

test("npm pack, npm install of the tarball, then import and require of @slotlease/client", { timeout: 10 * 60000 }, async () => {
  const tgz = tarball();

  const files = sh("tar", ["-tzf", tgz], scratch).trim().split("\n").sort();
  for (const f of [
    "package/LICENSE",
    "package/README.md",
    "package/package.json",
    "package/dist/esm/index.js",
    "package/dist/esm/index.d.ts",
    "package/dist/cjs/index.js",
    "package/dist/cjs/index.d.ts",
    "package/dist/cjs/package.json",
    "package/src/index.ts",
  ]) {
    assert.ok(files.includes(f), `the tarball has no ${f}; it has:\n${files.join("\n")}`);
  }
  const stray = files.filter((f) => !/^package\/(dist\/(esm|cjs)\/|src\/|LICENSE$|README\.md$|package\.json$)/.test(f));
  assert.deepEqual(stray, [], "files the package should not ship");
  const manifest = JSON.parse(sh("tar", ["-xzOf", tgz, "package/package.json"], scratch));
  assert.equal(manifest.license, "Apache-2.0");
  assert.equal(manifest.private, undefined, "a private package cannot be published");

  const project = join(scratch, "project");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "slotlease-consumer", version: "0.0.0", private: true }));
  // --prefer-offline: the dependencies npm ci just fetched come from npm's
  // cache; on a machine without them, from the registry.
  sh(npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", tgz], project);
  writeFileSync(join(project, "esm.mjs"), esmScript);
  writeFileSync(join(project, "cjs.cjs"), cjsScript);

  const mgr = await Manager.start({ node: "tspack", pools: "gpu=1" });
  try {
    const esm = await runScript(mgr, join(project, "esm.mjs"));
    const cjs = await runScript(mgr, join(project, "cjs.cjs"));
    const installed = join(project, "node_modules", "@slotlease", "client");
    assert.equal(fileURLToPath(esm.resolved), join(installed, "dist", "esm", "index.js"));
    assert.equal(cjs.resolved, join(installed, "dist", "cjs", "index.js"));
    const api = Object.keys(local).sort();
    assert.deepEqual(esm.exports, api, "import exposes the package's API");
    assert.deepEqual(cjs.exports, api, "require exposes the package's API");
    for (const [form, r] of [["import", esm], ["require", cjs]]) {
      assert.ok(Number(r.token) > 0, `${form}: a lease with a fencing token, got ${r.token}`);
      assert.equal(r.lost, "lease x lost: gone", `${form}: the error classes`);
    }
    assert.ok(Number(cjs.token) > Number(esm.token), "the second lease's token is the higher");
  } finally {
    await mgr.close();
  }

  // The declarations: `import` reaches dist/esm's, `require` dist/cjs's.
  writeFileSync(join(project, "esm-user.mts"), mts);
  writeFileSync(join(project, "cjs-user.cts"), cts);
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        module: "NodeNext",
        moduleResolution: "NodeNext",
        target: "ES2022",
        strict: true,
        noEmit: true,
        types: ["node"],
        typeRoots: [join(pkgDir, "node_modules", "@types")],
      },
      files: ["esm-user.mts", "cjs-user.cts"],
    }),
  );
  const tsc = join(pkgDir, "node_modules", "typescript", "bin", "tsc");
  const listed = sh(process.execPath, [tsc, "-p", project, "--listFiles"], project);
  for (const form of ["esm", "cjs"]) {
    const dts = join(project, "node_modules", "@slotlease", "client", "dist", form, "index.d.ts");
    assert.ok(listed.split("\n").includes(dts), `tsc did not read ${dts}:\n${listed}`);
  }
});
