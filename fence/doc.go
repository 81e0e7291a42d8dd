// Package fence gives one holder at a time the right to act on a queue: a
// lease per queue with an epoch, kept alive in the background, and a
// Done channel that closes before anyone else could be let in.
//
// # Overview
//
// A lease is a term with an identity: (queue, holder, epoch). The epoch is
// granted by the database, strictly increases per queue and is never
// reused, also after a release. A lease alone cannot keep two planners
// apart (a holder can be paused by the runtime or cut off mid-transaction
// and resume believing it still holds the lease), so every planner write
// names its term and is fenced by the store: it checks, inside the writing
// transaction and under a shared lock on the lease row, that the term is
// still current and unexpired, and fails with mend.ErrFenced otherwise. A
// takeover needs that row exclusively, so it waits for fenced transactions
// in flight: no write of epoch e lands after a write of epoch e+1.
//
// All expiry decisions are the database's (NOW(6) against expires_at). The
// holder's own clock only measures elapsed time on its monotonic clock; the
// two are never compared.
//
// # State model
//
//	             TryAcquire / Acquire
//	(contending) ─────────────────────▶ held ──┐ renew ok every RenewEvery
//	     ▲        ◀── HeldError: retry   │  ▲  │ (trust window moves on)
//	     │                               │  └──┘
//	     │               renew refused,  │            Release
//	     │        trust window ran out   │ ──────────────────────▶ released
//	     │                               ▼                            │
//	     └─────── contend again later ── lost (Done closed) ◀─────────┘
//	                                                  (Done closed too)
//
// # Trust window
//
// Let s be the holder's monotonic time read before an acquire or renew
// statement is sent. The database sets expires_at = NOW(6) + TTL, and its
// NOW(6) is read after the statement arrived, so in real time
//
//	expires_at ≥ s + TTL
//	trusted until s + TTL - SafetyMargin   (< expires_at by SafetyMargin)
//
// Each successful renew moves the window to its own s + TTL - SafetyMargin;
// a failed one moves nothing. If no renew succeeds in time, Done closes
// while the database still holds the term for this holder, so nobody else
// is in yet. SafetyMargin absorbs clock rate drift between the two machines
// and the time a last write takes to reach its fence check; even a write
// that slips past it is refused by the fence.
//
// # Failure handling
//
// When Done closes (Err says why), the holder must stop writing at once,
// cancel work in flight, call Release (harmless after loss) and contend
// again later with a new Acquire: a lost lease is never an error to retry,
// never a reason to exit the process, and never a silent standby. A write
// refused with mend.ErrFenced means the same and is never retried. Renew
// failures that are not refusals (the database unreachable or busy) are
// retried until the trust window runs out; only then is the lease lost.
//
// An acquire whose commit is ambiguous may have granted the term; the
// holder then finds its own name in the held error until the term expires,
// since a holder never re-enters a term it cannot vouch for. Lease rows are
// never deleted: the epoch lives in them.
//
// Hooks (acquired, renew latency, lost, released) let the binary bind
// metrics; the package registers none.
package fence
