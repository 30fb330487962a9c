package flags

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Section is what a flag is for. A command's help (NewFlagSet's usage)
// lists its flags under one heading per section, in the order below,
// where every flag has one; the role contracts' flags all do (a test
// fails for one that has none). A flag's section is given where the
// flag is declared, with its usage text:
//
//	fs.IntVar(&n, "workers", 2, flags.SectionJob.Usage("number of worker processes"))
type Section uint8

// The sections, in the order the help lists them.
const (
	SectionJob           Section = iota + 1 // the mode, the processes, how long
	SectionModel                            // model, data and evaluation
	SectionOptimizer                        // optimizer and learning rate
	SectionPS                               // the parameter-server modes
	SectionCheckpoints                      // the shards' checkpoints and journal
	SectionRing                             // the ring (allreduce)
	SectionCompute                          // device, threads, cores
	SectionCommunication                    // connections, calls, timeouts, the NIC model
	SectionMembership                       // gossip
	SectionSecurity                         // TLS, token
	SectionOutput                           // logs, metrics, timelines, what is written
	numSections
)

// Heading is the section's heading in the help.
func (s Section) Heading() string {
	switch s {
	case SectionJob:
		return "The job (its mode, its processes, how long it trains)"
	case SectionModel:
		return "Model, data and evaluation"
	case SectionOptimizer:
		return "Optimizer"
	case SectionPS:
		return "Parameter servers (async, sync, ssp)"
	case SectionCheckpoints:
		return "Checkpoints (the parameter servers')"
	case SectionRing:
		return "Ring (allreduce, no servers)"
	case SectionCompute:
		return "Compute (device, threads, cores)"
	case SectionCommunication:
		return "Communication (connections, calls, timeouts, the modelled NIC)"
	case SectionMembership:
		return "Membership (gossip)"
	case SectionSecurity:
		return "Security (TLS, token)"
	case SectionOutput:
		return "Output and observability"
	}
	return fmt.Sprintf("Section(%d)", uint8(s))
}

// sectionMark begins a usage text that names its section: the mark,
// then the section as one byte. No help text begins with a NUL.
const sectionMark = "\x00"

// Usage is text as the usage of a flag of section s: the help lists it
// under s's heading, and shows text alone.
func (s Section) Usage(text string) string {
	return sectionMark + string([]byte{byte(s)}) + text
}

// sectionOf is the section usage names (0: none) and its text.
func sectionOf(usage string) (Section, string) {
	rest, ok := strings.CutPrefix(usage, sectionMark)
	if !ok || rest == "" || rest[0] == 0 || rest[0] >= byte(numSections) {
		return 0, usage
	}
	return Section(rest[0]), rest[1:]
}

// Unsectioned are the names of fs's flags declared without a section.
func Unsectioned(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if s, _ := sectionOf(f.Usage); s == 0 {
			names = append(names, f.Name)
		}
	})
	return names
}

// printFlags lists fs's flags on w as flag.PrintDefaults does, under a
// heading per section where every flag has one, else under "Flags:"
// (a command whose own flags have none, sharing a group's that have).
// The defaults shown are the declared ones, whatever was parsed before.
func printFlags(fs *flag.FlagSet, w io.Writer) {
	grouped := len(Unsectioned(fs)) == 0
	lists := make([]*flag.FlagSet, numSections)
	fs.VisitAll(func(f *flag.Flag) {
		s, text := sectionOf(f.Usage)
		if !grouped {
			s = 0
		}
		if lists[s] == nil {
			lists[s] = flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
			lists[s].SetOutput(w)
		}
		lists[s].Var(f.Value, f.Name, text)
		lists[s].Lookup(f.Name).DefValue = f.DefValue
	})
	for s, list := range lists {
		if list == nil {
			continue
		}
		heading := "Flags"
		if s > 0 {
			heading = Section(s).Heading()
		}
		fmt.Fprintf(w, "\n%s:\n", heading)
		list.PrintDefaults()
	}
}
