// Builds app/web/static/editor.js, the one committed bundle the pages load, from src/ with the
// packages pinned in package-lock.json. Run through scripts/build-editor.sh (npm ci, then this).
// The header records the sha256 of the lock file and of every source file:
// tests/app/test_editor_bundle.py fails when the committed bundle was not rebuilt after a change.
//   node build.mjs           write the bundle
//   node build.mjs --check   exit 1 if the committed bundle differs from a fresh build
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const output = join(here, "..", "app", "web", "static", "editor.js");
const sha256 = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");
const sources = readdirSync(join(here, "src")).filter((name) => name.endsWith(".js")).sort();

const header = [
  "// loopgrade's code editor: CodeMirror 6 (MIT licence, Marijn Haverbeke and others) and",
  "// frontend/src, bundled by frontend/build.mjs. Do not edit: change frontend/src, then run",
  "// scripts/build-editor.sh.",
  `// sha256 frontend/package-lock.json ${sha256(join(here, "package-lock.json"))}`,
  ...sources.map((name) => `// sha256 frontend/src/${name} ${sha256(join(here, "src", name))}`),
  "",
].join("\n");

const result = await build({
  entryPoints: [join(here, "src", "editor.js")],
  bundle: true,
  format: "iife",
  target: ["es2020"],
  minify: true,
  legalComments: "none",
  charset: "utf8",
  write: false,
});
const bundle = header + result.outputFiles[0].text;

if (process.argv.includes("--check")) {
  const committed = readFileSync(output, "utf8");
  if (committed !== bundle) {
    console.error(`${output} differs from a fresh build: run scripts/build-editor.sh`);
    process.exit(1);
  }
  console.log(`${output} is up to date`);
} else {
  writeFileSync(output, bundle);
  console.log(`wrote ${output} (${bundle.length} bytes)`);
}
