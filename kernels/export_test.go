package kernels

// Sources gives the external tests the embedded kernel sources, which a
// test binary carries wherever it runs (the GPU machine has no checkout).
var Sources = sources
