package bench

import (
	"fmt"
	"strings"
)

// Operation is one thing bench can measure.
type Operation int

// The operations, collectives first.
const (
	AllReduce Operation = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	PingPong  // osu_latency: half a round trip between ranks 0 and 1
	Bandwidth // osu_bw: a window of sends from rank 0 to rank 1, then an ack
)

// Operations lists every operation, in the order a full run measures them.
var Operations = []Operation{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, PingPong, Bandwidth}

var operationNames = [...]string{"", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "pingpong", "bw"}

func (o Operation) String() string {
	if o < AllReduce || o > Bandwidth {
		return fmt.Sprintf("Operation(%d)", int(o))
	}
	return operationNames[o]
}

// Valid reports whether o is one of the operations.
func (o Operation) Valid() bool { return o >= AllReduce && o <= Bandwidth }

// PointToPoint reports whether o moves data between two ranks only.
func (o Operation) PointToPoint() bool { return o == PingPong || o == Bandwidth }

// Reduces reports whether o takes a reduction (-o).
func (o Operation) Reduces() bool { return o == AllReduce || o == ReduceScatter || o == Reduce }

// Rooted reports whether o has a root (-r).
func (o Operation) Rooted() bool { return o == Broadcast || o == Reduce }

// MarshalText writes the operation's name, for JSON.
func (o Operation) MarshalText() ([]byte, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("bench: invalid operation %d", int(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText reads an operation's name, for JSON.
func (o *Operation) UnmarshalText(b []byte) error {
	v, err := ParseOperation(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// operationAliases accepts nccl-tests' binary names and OSU's test names too.
var operationAliases = map[string]Operation{
	"all_reduce": AllReduce, "all_gather": AllGather, "reduce_scatter": ReduceScatter,
	"bcast": Broadcast, "latency": PingPong, "bandwidth": Bandwidth,
}

// ParseOperation reads one operation's name.
func ParseOperation(s string) (Operation, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, o := range Operations {
		if o.String() == s {
			return o, nil
		}
	}
	if o, ok := operationAliases[s]; ok {
		return o, nil
	}
	return 0, fmt.Errorf("unknown operation %q (want %s)", s, strings.Join(operationNames[1:], ", "))
}

// ParseOperations reads a comma-separated list such as "allreduce,pingpong";
// "all" means every operation. Repeats are dropped, order is kept; an empty
// item ("allreduce,,bw", "" alone) is an error.
func ParseOperations(s string) ([]Operation, error) {
	if strings.TrimSpace(s) == "all" {
		return append([]Operation(nil), Operations...), nil
	}
	var ops []Operation
	seen := map[Operation]bool{}
	for i, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			// "allreduce,,bw" is a name left out, not a list of two.
			return nil, fmt.Errorf("%q: item %d is empty", s, i+1)
		}
		o, err := ParseOperation(f)
		if err != nil {
			return nil, err
		}
		if !seen[o] {
			seen[o] = true
			ops = append(ops, o)
		}
	}
	return ops, nil
}
