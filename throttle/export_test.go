package throttle

// Released1 is released1, for the tests of package throttle_test: what one ticket gives back, as
// Limit.Release reconciles it.
var Released1 = released1
