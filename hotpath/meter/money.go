package meter

import "github.com/edgegw/gateway/hotpath"

// Money is integer and exact: prices are micro-USD per million tokens, caps
// micro-USD, and costs and spend counters pico-USD (1e-12 USD), so a price
// times a token count is a cost with nothing rounded.

// picoPerMicro converts micro-USD to pico-USD.
const picoPerMicro = 1_000_000

// Cost is what input tokens (cacheRead of them read from the prompt cache)
// and output tokens cost at prices, in pico-USD. It is the one place the
// gateway turns tokens into money: the bill a client sees, the amount a
// request is admitted against and the spend it settles all come from it.
func Cost(prices *hotpath.Prices, input, cacheRead, output int64) int64 {
	return (input-cacheRead)*prices.InputPerM + cacheRead*prices.CacheReadPerM + output*prices.OutputPerM
}

// PicoUSD converts a micro-USD amount (a cap, a credit) to the pico-USD its
// counter holds.
func PicoUSD(micros int64) int64 { return micros * picoPerMicro }
