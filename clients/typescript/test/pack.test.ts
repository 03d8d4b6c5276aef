// `npm pack` makes a package that installs into a project of its own,
// imports and type-checks there, with nothing but itself: from an ES module,
// and from CommonJS through require() where Node.js loads ES modules with
// it (20.19 and newer), through import() where it does not.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { packageDir, repoDir } from "./support/bus.js";

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
let dir: string;
let tarball: string;
let files: string[];

before(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-pack-"));
  // dist/ is built by pretest; prepack would build it again.
  const out = execFileSync(npm, ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: packageDir, encoding: "utf8" });
  const [packed] = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
  tarball = path.join(dir, packed!.filename);
  files = packed!.files.map((f) => f.path);
});

after(() => rmSync(dir, { recursive: true, force: true }));

describe("npm pack", () => {
  it("holds the built module, its declarations, its README and the license, and no sources or tests", () => {
    const top = ["package.json", "README.md", "LICENSE"];
    for (const f of [...top, "dist/index.js", "dist/index.d.ts", "dist/openapi.d.ts", "dist/client.js"]) {
      assert.ok(files.includes(f), `the package lacks ${f}`);
    }
    assert.deepEqual(files.filter((f) => !f.startsWith("dist/") && !top.includes(f)), []);
    assert.equal(
      readFileSync(path.join(packageDir, "LICENSE"), "utf8"),
      readFileSync(path.join(repoDir, "LICENSE"), "utf8"),
      "clients/typescript/LICENSE is not the repository's LICENSE",
    );
    const pkg = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8")) as Record<string, unknown>;
    assert.equal(pkg.dependencies, undefined, "the package has runtime dependencies");
  });

  it("installs into a fresh project, offline, where it imports and type-checks", () => {
    const project = path.join(dir, "project");
    mkdirSync(project);
    writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "producer", private: true, type: "module" }));
    execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", tarball], { cwd: project, stdio: "pipe" });
    const program = `import { build, Client, StaticToken, StorybusError, type SOMMessage } from "@storybus/client";
const m = build({ messageType: "story.event", systemId: "cms", payload: { story_id: "s", event: "published", occurred_at: "2026-11-29T09:00:00Z" } });
const parsed: SOMMessage = JSON.parse(m.text());
new Client({ url: "http://127.0.0.1:8080", workspace: "newsroom", tokens: new StaticToken("t") });
console.log(parsed.message_type, m.key, new StorybusError({ status: 409, rule: "sequence.stale" }).class());
`;
    writeFileSync(path.join(project, "main.ts"), program);
    writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          outDir: "out",
          typeRoots: [path.join(packageDir, "node_modules", "@types")],
          types: ["node"],
        },
        files: ["main.ts"],
      }),
    );
    execFileSync(process.execPath, [path.join(packageDir, "node_modules", "typescript", "bin", "tsc"), "-p", project], { stdio: "pipe" });
    const out = execFileSync(process.execPath, [path.join(project, "out", "main.js")], { cwd: project, encoding: "utf8" });
    assert.equal(out, "story.event story:s story-changed\n");
  });

  it("loads into a CommonJS project: require() where Node.js requires ES modules, import() everywhere", () => {
    const project = path.join(dir, "commonjs");
    mkdirSync(project);
    writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "producer-cjs", private: true }));
    execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", tarball], { cwd: project, stdio: "pipe" });
    const use = `const m = build({ messageType: "story.event", systemId: "cms", payload: { story_id: "s", event: "published", occurred_at: "2026-11-29T09:00:00Z" } });
console.log(m.key, new StorybusError({ status: 409, rule: "sequence.stale" }).class());`;
    writeFileSync(path.join(project, "required.cjs"), `const { build, StorybusError } = require("@storybus/client");\n${use}\n`);
    writeFileSync(path.join(project, "imported.cjs"), `import("@storybus/client").then(({ build, StorybusError }) => {\n${use}\n});\n`);
    const run = (file: string) => spawnSync(process.execPath, [path.join(project, file)], { cwd: project, encoding: "utf8" });
    const imported = run("imported.cjs");
    assert.equal(imported.stdout, "story:s story-changed\n", imported.stderr);
    const required = run("required.cjs");
    if (process.features.require_module) {
      // The default export condition: require() resolves the package and loads it.
      assert.equal(required.stdout, "story:s story-changed\n", required.stderr);
    } else {
      assert.notEqual(required.status, 0);
      assert.match(required.stderr, /ERR_REQUIRE_ESM/, `Node.js ${process.version} cannot require() an ES module`);
    }
    // A CommonJS TypeScript project type-checks against the declarations (module NodeNext).
    writeFileSync(path.join(project, "main.cts"), `import { build, StorybusError } from "@storybus/client";\n${use}\n`);
    writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          outDir: "out",
          typeRoots: [path.join(packageDir, "node_modules", "@types")],
          types: ["node"],
        },
        files: ["main.cts"],
      }),
    );
    execFileSync(process.execPath, [path.join(packageDir, "node_modules", "typescript", "bin", "tsc"), "-p", project], { stdio: "pipe" });
    assert.match(readFileSync(path.join(project, "out", "main.cjs"), "utf8"), /require\("@storybus\/client"\)/);
  });
});
