// Package driver is the kit for gpucomm's backends, apart from the API that
// programs use (package comm), as database/sql/driver is apart from
// database/sql: a backend imports it, programs do not need to.
//
// It holds what every backend shares and what comm names for programs: the
// element types (DType) and reductions (Op), with the one table of each
// that every mapping (MPI, NCCL, host, the C baselines) is checked against;
// the sentinel errors and *Error; the description of one call (Call, with
// the argument checks every backend runs before it touches memory, and the
// signature that ranks compare); host reductions (ReduceInto, DivideInto);
// what a backend registers (Driver, Verdict, Options); and Front, the one
// dispatcher that turns each data method of comm.Communicator into a
// checked Call for the backend's Engine, so that a backend implements how
// bytes move and nothing else.
//
// driver never imports comm; comm names these types for programs through
// aliases (comm.DType is driver.DType), so a value moves between the two
// packages without a conversion.
package driver
