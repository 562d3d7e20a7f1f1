// Package validate holds the one shape of "these request fields are
// invalid", shared by every command's validation and rendered by the HTTP
// adapter as a VALIDATION_FAILED problem.
package validate

import "strings"

// FieldError names one invalid request field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error lists every invalid field of a request.
type Error struct {
	Fields []FieldError
}

func (e *Error) Error() string {
	msgs := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		msgs[i] = f.Field + ": " + f.Message
	}
	return "invalid request: " + strings.Join(msgs, "; ")
}

// Collector gathers field errors while a request is checked.
type Collector struct{ fields []FieldError }

// Add records that field is invalid.
func (c *Collector) Add(field, msg string) {
	c.fields = append(c.fields, FieldError{Field: field, Message: msg})
}

// Err returns an *Error naming every field added, or nil.
func (c *Collector) Err() error {
	if len(c.fields) == 0 {
		return nil
	}
	return &Error{Fields: c.fields}
}
