package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/shoalml/shoal/emulate"
)

// recordGlob matches the files of shoal train --record-pushes DIR.
const recordGlob = "worker-*.pushes.json"

// recordFile is where shoal train --record-pushes DIR has worker rank
// write its pushes.
func recordFile(dir string, rank int) string {
	return filepath.Join(dir, "worker-"+strconv.Itoa(rank)+".pushes.json")
}

// clearRecordings removes an earlier run's recordings from dir (none
// when dir is empty), so that a replay of dir finds only the next run's.
func clearRecordings(dir string) error { return clearEarlier(dir, "--record-pushes", recordGlob) }

// clearEarlier removes the files of an earlier run matching globs from
// dir (nothing when dir is empty), for flag.
func clearEarlier(dir, flag string, globs ...string) error {
	if dir == "" {
		return nil
	}
	for _, g := range globs {
		old, err := filepath.Glob(filepath.Join(dir, g))
		if err != nil {
			return err
		}
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return fmt.Errorf("%s: removing an earlier run's file: %w", flag, err)
			}
		}
	}
	return nil
}

// readRecordings reads the workers' recordings in dir, as shoal train
// --record-pushes wrote them.
func readRecordings(dir string) ([]emulate.Recording, error) {
	files, err := filepath.Glob(filepath.Join(dir, recordGlob))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("--replay %s: no %s in it: want the folder of a run of shoal train --record-pushes", dir, recordGlob)
	}
	var recs []emulate.Recording
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--replay: %w", err)
		}
		var r emulate.Recording
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("--replay: %s: not a recording of shoal worker --record-pushes: %w", f, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
