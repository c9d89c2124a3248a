package comm

import "testing"

// DTypeOf maps each Go element type to its DType (moved from the DType
// table's test when the table went to package driver).
func TestDTypeOf(t *testing.T) {
	checks := []struct {
		got, want DType
	}{
		{DTypeOf[int8](), Int8}, {DTypeOf[uint8](), Uint8}, {DTypeOf[int32](), Int32}, {DTypeOf[uint32](), Uint32},
		{DTypeOf[int64](), Int64}, {DTypeOf[uint64](), Uint64}, {DTypeOf[Half](), Float16}, {DTypeOf[BF16](), BFloat16},
		{DTypeOf[float32](), Float32}, {DTypeOf[float64](), Float64},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("DTypeOf gave %v, want %v", c.got, c.want)
		}
	}
}
