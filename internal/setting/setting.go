// Package setting describes a setting that a module of the service declares
// (operation.Module.Settings): its environment variable and flag, its
// default, what it means, and how its value is read. Package config loads
// and lists (-help) every declared setting beside its own without naming
// any, and the module reads its value where it is built (Value), so a
// setting lives in the package that uses it.
package setting

import (
	"fmt"
	"strings"
	"time"
)

// Setting is one setting a module declares.
type Setting struct {
	// Name is its environment variable (AUTHORIZATION_TTL); its flag is
	// the same in lower case with dashes (Flag).
	Name string
	// Default is its value when neither sets it, written as either would.
	Default string
	// Usage says what it means, in one line of -help.
	Usage string
	// Parse reads a value; its error says what a value must be, to follow
	// the setting's name ("must be positive, not 0s").
	Parse func(string) (any, error)
}

// Flag is the setting's flag name (authorization-ttl).
func (s Setting) Flag() string { return strings.ReplaceAll(strings.ToLower(s.Name), "_", "-") }

// Values are settings' values by name, as their Parse read them.
type Values map[string]any

// Value is s's value in v as a T, or its default when v has none (the
// service built without package config, as tests build it).
func Value[T any](v Values, s Setting) (T, error) {
	var zero T
	val, ok := v[s.Name]
	if !ok {
		var err error
		if val, err = s.Parse(s.Default); err != nil {
			return zero, fmt.Errorf("the default of %s, %q: %w", s.Name, s.Default, err)
		}
	}
	t, ok := val.(T)
	if !ok {
		return zero, fmt.Errorf("%s holds a %T, not a %T", s.Name, val, zero)
	}
	return t, nil
}

// Duration is a setting whose value is a positive time.Duration.
func Duration(name, def, usage string) Setting {
	return Setting{Name: name, Default: def, Usage: usage, Parse: func(v string) (any, error) {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return nil, fmt.Errorf("must be a duration such as 90s, 30m or 168h, not %q", v)
		case d <= 0:
			return nil, fmt.Errorf("must be positive, not %s", d)
		}
		return d, nil
	}}
}
