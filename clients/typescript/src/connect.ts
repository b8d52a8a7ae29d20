// connect(): finds the NATS address and credentials the way `executor`
// does (config.LoadCommonAs(config.RoleExecutor), config/authdir.go,
// config/private.go, jetstream.Connect), and makes a Client.

import { lstatSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import { isAbsolute, join } from "node:path";
import {
  connect as natsConnect,
  credsAuthenticator,
  nkeyAuthenticator,
  type ConnectionOptions,
  type NatsConnection,
} from "@nats-io/transport-node";
import { fromSeed } from "@nats-io/nkeys";
import { Client, type Role } from "./client.js";
import { BadRequestError, UnavailableError } from "./errors.js";
import { DEFAULT_PREFIX, prefixProblem, sanitizeNodeId, tokenProblem } from "./protocol.js";

/** Where connect() looks, and what it may be told instead. */
export interface ConnectOptions {
  /** NATS server URL(s); NATS_URL otherwise, else the embedded server at NATS_LISTEN (127.0.0.1:4222). */
  servers?: string | string[];
  /** A .creds file (user JWT and nkey seed); NATS_CREDS otherwise. */
  creds?: string;
  /** A user nkey seed (SU...) or the path of a file holding one; NATS_NKEY (a path) otherwise. */
  nkeySeed?: string;
  /** User and password; NATS_USER and NATS_PASSWORD otherwise. */
  user?: string;
  pass?: string;
  /** Reply-subject prefix; NATS_INBOX_PREFIX otherwise ("_INBOX"). The embedded server's role files bring their own. */
  inboxPrefix?: string;
  /** The node to ask; NODE_ID otherwise, else the host name as leasemgr makes it a node id. */
  node?: string;
  /** The subject prefix; LEASE_SUBJECT_PREFIX otherwise ("lease"). */
  prefix?: string;
  /** Names this client in leases and events (`<hostname>:<pid>`). */
  holder?: string;
  /**
   * The embedded server's role whose credentials to use when none are given
   * ("executor"; "reader" for monitoring code: stats and events only).
   */
  role?: Role;
  /** The environment to read (process.env). */
  env?: Record<string, string | undefined>;
  /** The connection's name, as servers show it ("slotlease-ts"). */
  name?: string;
  /** Passed to Client: see ClientOptions. Default: true in the default layout (the embedded server, no servers given), as `executor` does. */
  serverOnlyDrops?: boolean;
  requestTimeoutMs?: number;
  pollIntervalMs?: number;
  noManagerWaitMs?: number;
}

/** What connect() resolved: the address, the credentials' origin and the settings, without any secret. */
export interface ResolvedConfig {
  servers: string[];
  node: string;
  prefix: string;
  inboxPrefix: string;
  /** The role file used, when the embedded server's credentials were found. */
  embeddedCreds?: string;
  creds?: string;
  nkeyFile?: string;
  user?: string;
  /** The default layout: leasemgr's embedded server, no NATS_URL (or servers) given. */
  embedded: boolean;
  authDir?: string;
}

const DEFAULT_LISTEN = "127.0.0.1:4222";

/** The role's inbox prefix: the only inbox its user may subscribe to on the embedded server. */
export function roleInboxPrefix(r: Role): string {
  return r === "reader" ? "_SLOTLEASE_READ" : "_INBOX";
}

/** Go's os.UserConfigDir() for this platform. */
export function userConfigDir(env: Record<string, string | undefined> = process.env): string {
  switch (process.platform) {
    case "darwin": {
      const h = env.HOME ?? "";
      if (h === "") throw new Error("$HOME is not defined");
      return join(h, "Library", "Application Support");
    }
    case "win32": {
      const d = env.AppData ?? env.APPDATA ?? "";
      if (d === "") throw new Error("%AppData% is not defined");
      return d;
    }
    default: {
      const x = env.XDG_CONFIG_HOME ?? "";
      if (x !== "") {
        if (!isAbsolute(x)) throw new Error("path in $XDG_CONFIG_HOME is relative");
        return x;
      }
      const h = env.HOME ?? "";
      if (h === "") throw new Error("neither $XDG_CONFIG_HOME nor $HOME are defined");
      return join(h, ".config");
    }
  }
}

/** Splits host:port as Go's net.SplitHostPort does (brackets around IPv6). */
function splitHostPort(hp: string): [string, string] {
  if (hp.startsWith("[")) {
    const end = hp.indexOf("]");
    if (end < 0 || hp[end + 1] !== ":") throw new Error(`address ${hp}: missing port`);
    return [hp.slice(1, end), hp.slice(end + 2)];
  }
  const i = hp.lastIndexOf(":");
  if (i < 0) throw new Error(`address ${hp}: missing port in address`);
  const host = hp.slice(0, i);
  if (host.includes(":")) throw new Error(`address ${hp}: too many colons in address`);
  return [host, hp.slice(i + 1)];
}

/** <configDir>/slotlease/embedded-<host>-<port>: where the embedded server listening on hostport keeps its credentials. */
export function authDirUnder(configDir: string, hostport: string): string {
  let [host, port] = splitHostPort(hostport);
  if (host === "") host = "any";
  // The same server as 127.0.0.1 (config.AuthDirUnder): nats://localhost:4222
  // finds the credentials a server listening on 127.0.0.1:4222 made.
  if (host === "localhost") host = "127.0.0.1";
  let name = "";
  for (const ch of host) name += ch.length === 1 && /[A-Za-z0-9_.-]/.test(ch) ? ch : "_";
  return join(configDir, "slotlease", `embedded-${name}-${port}`);
}

/** The address whose auth directory is used by default: NATS_LISTEN without a URL, else the host:port of a single-server URL. */
function embeddedHostPort(url: string, listen: string): string {
  if (url === "") return listen;
  if (url.includes(",")) return "";
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "";
  }
  if (u.host === "") return "";
  const host = u.hostname.startsWith("[") ? u.hostname : u.hostname.includes(":") ? `[${u.hostname}]` : u.hostname;
  return `${host}:${u.port === "" ? "4222" : u.port}`;
}

/**
 * Checks that path is a directory (dir) or regular file, not a symbolic
 * link, owned by this user and closed to group and others, as one holding
 * secrets must be (config.CheckPrivateDir/File). The error names the path
 * and the fix.
 */
export function checkPrivate(path: string, dir: boolean): void {
  let st;
  try {
    st = lstatSync(path);
  } catch (err) {
    throw new Error(`${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const want = dir ? "a directory" : "a regular file";
  if (dir ? !st.isDirectory() : !st.isFile()) throw new Error(`${path}: is not ${want} (a symbolic link or special file is refused)`);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) {
    throw new Error(`${path}: is owned by uid ${st.uid}, not by this user (uid ${uid}): refusing credentials someone else controls`);
  }
  const perm = st.mode & 0o777;
  if ((perm & 0o077) !== 0) {
    throw new Error(`${path}: is accessible to group or others (mode ${perm.toString(8).padStart(4, "0")}); run: chmod ${dir ? "700" : "600"} ${path}`);
  }
}

/** The first nkey seed in data (decorated or bare), as a user seed; the error never shows the content. */
export function userSeed(data: string): Uint8Array {
  const m = /S[A-Z2-7]{57}/.exec(data);
  if (m === null) throw new Error("no nkey seed in the file");
  const seed = new TextEncoder().encode(m[0]);
  let pub: string;
  try {
    pub = fromSeed(seed).getPublicKey();
  } catch (err) {
    throw new Error(`bad nkey seed: ${(err as Error).message}`);
  }
  if (!pub.startsWith("U")) throw new Error(`is not a user seed: want SU..., got S${pub[0]}...`);
  return seed;
}

function varErr(name: string, value: string, err: unknown): BadRequestError {
  return new BadRequestError(`${name}: ${JSON.stringify(value)}: ${(err as Error).message}`);
}

/**
 * Resolves the address and credentials as `executor` does, without
 * connecting. Throws BadRequestError naming the variable for a credential
 * file that is unsafe or unreadable.
 */
export function resolveConfig(opts: ConnectOptions = {}): { config: ResolvedConfig; options: ConnectionOptions } {
  const env = opts.env ?? process.env;
  const get = (k: string) => env[k] ?? "";
  const role: Role = opts.role ?? "executor";
  const url = opts.servers !== undefined ? (Array.isArray(opts.servers) ? opts.servers.join(",") : opts.servers) : get("NATS_URL");
  const listen = get("NATS_LISTEN") !== "" ? get("NATS_LISTEN") : DEFAULT_LISTEN;
  const node = opts.node ?? (get("NODE_ID") !== "" ? get("NODE_ID") : sanitizeNodeId(hostname()));
  const np = tokenProblem(node);
  if (np !== undefined) throw varErr("NODE_ID", node, new Error(np));
  const prefix = opts.prefix ?? (get("LEASE_SUBJECT_PREFIX") !== "" ? get("LEASE_SUBJECT_PREFIX") : DEFAULT_PREFIX);
  const pp = prefixProblem(prefix);
  if (pp !== undefined) throw varErr("LEASE_SUBJECT_PREFIX", prefix, new Error(pp));
  let inboxPrefix = opts.inboxPrefix ?? (get("NATS_INBOX_PREFIX") !== "" ? get("NATS_INBOX_PREFIX") : "_INBOX");
  const ip = prefixProblem(inboxPrefix);
  if (ip !== undefined) throw varErr("NATS_INBOX_PREFIX", inboxPrefix, new Error(ip));

  const creds = opts.creds ?? get("NATS_CREDS");
  const nkey = opts.nkeySeed ?? get("NATS_NKEY");
  const user = opts.user ?? get("NATS_USER");
  const pass = opts.pass ?? get("NATS_PASSWORD");
  const options: ConnectionOptions = {
    name: opts.name ?? "slotlease-ts",
    servers: (url === "" ? `nats://${listen}` : url).split(",").map((s) => s.trim()),
    maxReconnectAttempts: -1,
    // Soon: a holder with fast release whose connection dropped has about
    // 0.5 s (3/4 of the disconnect grace) to be back and move its leases.
    reconnectTimeWait: 50,
    reconnectJitter: 50,
    waitOnFirstConnect: false,
  };
  const config: ResolvedConfig = { servers: options.servers as string[], node, prefix, inboxPrefix, embedded: url === "" };
  const set = [creds !== "" && "NATS_CREDS", nkey !== "" && "NATS_NKEY", user !== "" && "NATS_USER"].filter(Boolean);
  if (set.length > 1) throw new BadRequestError(`${set.join(" and ")} cannot be combined: set one way to authenticate`);

  if (creds !== "") {
    let data: Uint8Array;
    try {
      data = readFileSync(creds);
    } catch (err) {
      throw varErr("NATS_CREDS", creds, err);
    }
    options.authenticator = credsAuthenticator(data);
    config.creds = creds;
  } else if (nkey !== "") {
    let seed: Uint8Array;
    const literal = /^S[A-Z2-7]{57}$/.test(nkey.trim());
    try {
      seed = userSeed(literal ? nkey.trim() : readFileSync(nkey, "utf8"));
    } catch (err) {
      throw varErr("NATS_NKEY", literal ? "<seed>" : nkey, err);
    }
    options.authenticator = nkeyAuthenticator(seed);
    if (!literal) config.nkeyFile = nkey;
  } else if (user !== "") {
    options.user = user;
    options.pass = pass;
    config.user = user;
  } else {
    // The embedded server's role file, when its directory exists.
    let dir = get("NATS_AUTH_DIR");
    if (dir === "") {
      const hp = embeddedHostPort(url, listen);
      if (hp !== "") {
        try {
          dir = authDirUnder(userConfigDir(env), hp);
        } catch {
          dir = ""; // no home directory: no default
        }
      }
    }
    let exists = false;
    if (dir !== "") {
      try {
        lstatSync(dir);
        exists = true;
      } catch {
        exists = false;
      }
    }
    if (exists) {
      const file = join(dir, `${role}.nk`);
      let seed: Uint8Array;
      try {
        checkPrivate(dir, true);
        checkPrivate(file, false);
        seed = userSeed(readFileSync(file, "utf8"));
      } catch (err) {
        throw varErr("NATS_AUTH_DIR", dir, err);
      }
      options.authenticator = nkeyAuthenticator(seed);
      inboxPrefix = roleInboxPrefix(role);
      config.inboxPrefix = inboxPrefix;
      config.embeddedCreds = file;
      config.authDir = dir;
    }
  }
  options.inboxPrefix = inboxPrefix;
  const tlsCA = get("NATS_TLS_CA");
  const tlsCert = get("NATS_TLS_CERT");
  const tlsKey = get("NATS_TLS_KEY");
  if ((tlsCert === "") !== (tlsKey === "")) throw new BadRequestError("NATS_TLS_CERT and NATS_TLS_KEY: set both or neither");
  if (tlsCA !== "" || tlsCert !== "") {
    options.tls = {};
    if (tlsCA !== "") options.tls.caFile = tlsCA;
    if (tlsCert !== "") {
      options.tls.certFile = tlsCert;
      options.tls.keyFile = tlsKey;
    }
  }
  return { config, options };
}

/**
 * Connects as `executor` does and returns a Client for the node (NODE_ID, or
 * opts.node). With no options, on the host of a `leasemgr` running its
 * embedded server, it finds that server (NATS_LISTEN) and the executor
 * role's credentials in NATS_AUTH_DIR (by default
 * <config dir>/slotlease/embedded-<host>-<port>), refusing files others
 * could read. client.close() closes the connection too.
 */
export async function connect(opts: ConnectOptions = {}): Promise<Client> {
  const { config, options } = resolveConfig(opts);
  let nc: NatsConnection;
  try {
    nc = await natsConnect(options);
  } catch (err) {
    throw new UnavailableError(
      `connect to NATS at ${config.servers.join(",")}: ${(err as Error).message}${config.embedded ? " (is leasemgr running?)" : ""}`,
      undefined,
      { cause: err },
    );
  }
  try {
    return new Client(nc, {
      node: config.node,
      prefix: config.prefix,
      inboxPrefix: config.inboxPrefix,
      holder: opts.holder,
      role: opts.role ?? (config.embeddedCreds !== undefined ? "executor" : undefined),
      serverOnlyDrops: opts.serverOnlyDrops ?? config.embedded,
      ownsConnection: true,
      requestTimeoutMs: opts.requestTimeoutMs,
      pollIntervalMs: opts.pollIntervalMs,
      noManagerWaitMs: opts.noManagerWaitMs,
    });
  } catch (err) {
    await nc.close();
    throw err;
  }
}

