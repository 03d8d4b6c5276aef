// TLS against a real `storybus dev` serving HTTPS with a private CA and
// mutual TLS: tlsFetch trusts the CA and presents a client certificate,
// whose tokens are bound to it; a certificate the client does not trust
// is configuration, never retried. The certificates are made with openssl.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  build,
  Client,
  ClientCredentials,
  isUntrustedCertificate,
  openOutbox,
  StaticToken,
  StorybusError,
  tlsFetch,
} from "@storybus/client";
import { type Bus, repoDir, startDev, WORKSPACE } from "./support/bus.js";
import { Recorder } from "./support/transport.js";

const spiffeID = "spiffe://newsroom.example/ns/cms/sa/publisher";
let dir: string;
let bus: Bus;
const file = (name: string) => path.join(dir, name);

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** sign makes a key and a certificate signed by the test CA, with the extensions given. */
function sign(name: string, subject: string, extensions: string): void {
  openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject);
  writeFileSync(file(`${name}.ext`), extensions);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-out", `${name}.crt`, "-extfile", `${name}.ext`);
}

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-tls-"));
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=storybus test CA",
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  sign("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  sign("cms", "/CN=cms", `subjectAltName=URI:${spiffeID}\nextendedKeyUsage=clientAuth\n`);
  // storybus dev's sample workspace, with cms authenticated by its certificate.
  const sample = readFileSync(path.join(repoDir, "config", "dev", "workspace-newsroom.yaml"), "utf8");
  const config = sample.replace(/^( {4}clientID: cms\n)/m, `$1    tlsClientAuth:\n      sanURI: ${spiffeID}\n`);
  assert.notEqual(config, sample, "the sample workspace has no cms connection to give a certificate");
  writeFileSync(file("workspace.yaml"), config);
  bus = await startDev(
    ["--config", file("workspace.yaml"), "--tls-cert-file", file("server.crt"), "--tls-key-file", file("server.key"), "--tls-client-ca-file", file("ca.crt")],
  );
});

after(async () => {
  await bus?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function snapshot(story: string) {
  return build({
    messageType: "story.context",
    systemId: "cms",
    payload: { story_id: story, sequence_number: 1, state: "draft", headline: "Over TLS" },
  });
}

describe("tlsFetch", () => {
  it("gets tokens with the client certificate alone, bound to it, and publishes", async () => {
    const fetch = tlsFetch({ caFile: file("ca.crt"), certFile: file("cms.crt"), keyFile: file("cms.key") });
    const tokens = new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", fetch });
    const client = new Client({ url: bus.url, workspace: WORKSPACE, tokens, fetch });
    const res = await client.publish(snapshot("ts-tls-1"));
    assert.equal(res.status, 202);

    // The token is useless over a connection without the certificate.
    const bound = await tokens.token();
    const withoutCert = new Client({ url: bus.url, workspace: WORKSPACE, tokens: new StaticToken(bound), fetch: tlsFetch({ caFile: file("ca.crt") }) });
    const err = await withoutCert.publish(snapshot("ts-tls-2")).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.rule], [401, "auth.token.invalid"]);
  });

  it("fails at once, kept, when the bus's certificate is not trusted", async () => {
    const recorder = new Recorder();
    const tokens = new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: "cms-dev-secret-0123456789abcdef0", fetch: recorder.fetch });
    const outbox = await openOutbox(path.join(dir, "outbox"));
    const alerts: StorybusError[] = [];
    const client = new Client({ url: bus.url, workspace: WORKSPACE, tokens, fetch: recorder.fetch, outbox, onAlert: (e) => alerts.push(e) });
    const err = await client.publish(snapshot("ts-tls-3")).catch((e: unknown) => e);
    assert.ok(isUntrustedCertificate(err), String(err));
    const e = err as StorybusError;
    assert.ok(e.kept && !e.temporary(), e.message);
    assert.equal(e.class(), "not-allowed");
    assert.equal(recorder.sent.length, 1, "an untrusted certificate was tried again");
    assert.deepEqual(alerts, [e]);
    assert.equal((await outbox.list()).length, 1);
  });

  it("refuses half a key pair and a CA file without a certificate", () => {
    assert.throws(() => tlsFetch({ certFile: file("cms.crt") }), /both its certificate and key/);
    assert.throws(() => tlsFetch({ caFile: file("cms.key") }), /holds no PEM certificate/);
    assert.throws(() => tlsFetch({ caFile: file("missing.crt") }), /CA file/);
  });
});
