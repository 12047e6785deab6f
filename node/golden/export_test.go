package golden

// TakeLease exposes the origin Lease to the tests of package golden_test.
var TakeLease = (*Reconciler).takeLease
