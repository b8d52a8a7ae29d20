// npm run build (and prepack): the package twice from src/, as ES modules
// in dist/esm and as CommonJS in dist/cjs, each with its declarations.
// dist/cjs gets a package.json of its own saying "commonjs", since the
// package's says "module". dist/ is emptied first so that nothing a former
// layout left there is packed.

import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

rmSync(join(root, "dist"), { recursive: true, force: true });
for (const project of ["tsconfig.json", "tsconfig.cjs.json"]) {
  execFileSync(process.execPath, [tsc, "-p", project], { cwd: root, stdio: "inherit" });
}
writeFileSync(join(root, "dist", "cjs", "package.json"), '{ "type": "commonjs" }\n');
