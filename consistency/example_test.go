package consistency_test

import (
	"encoding/json"
	"fmt"

	"github.com/shoalml/shoal/consistency"
)

func Example() {
	m, err := consistency.Parse("ssp")
	if err != nil {
		panic(err)
	}
	fmt.Println(m, m.UsesServers(), m.Synchronous(0), m.Synchronous(2))

	var h consistency.Staleness
	h.Add(0)
	h.Add(2)
	fmt.Println(h.Mean(), h.Worst(), h)

	b, _ := json.Marshal(struct {
		Mode      consistency.Mode      `json:"mode"`
		Staleness consistency.Staleness `json:"staleness"`
	}{m, h})
	fmt.Println(string(b))
	// Output:
	// ssp true true false
	// 1 2 0:1 2:1
	// {"mode":"ssp","staleness":{"0":1,"2":1}}
}
