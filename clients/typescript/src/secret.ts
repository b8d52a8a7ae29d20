// An acquire's secret proves holdership: lease ids and tokens are public
// (events, /v1/leases), so whoever knows the secret may renew, release or
// cancel the lease. It is 128 bits from the operating system's CSPRNG, as
// 22 characters of base64url, and shares nothing with the request id: a
// NUID (what ids are) is a random prefix plus a counter with a small random
// step, so a secret drawn from nuid right after the id was the id plus
// 33..333, found in a few hundred guesses (issue 38).

import { randomBytes } from "node:crypto";

/** How many random bytes a secret the client draws holds. */
export const SECRET_BYTES = 16;

/** A fresh secret: SECRET_BYTES random bytes, base64url without padding. */
export function newSecret(): string {
  return randomBytes(SECRET_BYTES).toString("base64url");
}
