// Package meter owns metering: every limit the gateway enforces and every
// amount it charges. Plans (the numbers), per-minute request windows, the
// chat concurrency ceiling, budgets (spend caps, prepaid credit, token
// pools, the monthly request cap), the charge one request is admitted
// against and settled to, the money arithmetic (Cost: the one place tokens
// and prices become pico-USD), the Counters interface every store
// implements, and MemoryCounters, the in-process store. The contract suite
// both stores pass is metertest.
//
// Every metered route goes through Limits: Hit for a request window,
// FillCharge, AdmitChat and FinishChat for a chat request. How a tier
// meters is data in its hotpath.Tier (PoolWeight, RequestCapped), read
// here and nowhere else. The Redis store lives in storage, which implements
// Counters; this package, like hotpath, links no driver.
package meter
