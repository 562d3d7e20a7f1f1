// Package validate holds the one shape of "these request fields are
// invalid", shared by every command's validation and rendered by the HTTP
// adapter as a VALIDATION_FAILED problem.
package validate

import (
	"strings"
	"unicode/utf8"
)

// StorableText reports whether s can be stored in, or compared with, a
// PostgreSQL text column: valid UTF-8 without NUL. Anything a request
// brings that a statement will bind as text must be, or the statement
// fails (a 500) instead of the request being refused.
func StorableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

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
type Collector struct{ fields, cardData []FieldError }

// Add records that field is invalid.
func (c *Collector) Add(field, msg string) {
	c.fields = append(c.fields, FieldError{Field: field, Message: msg})
}

// Err returns a *CardDataError naming every field that holds card data,
// else an *Error naming every field added, or nil.
func (c *Collector) Err() error {
	if len(c.cardData) > 0 {
		return &CardDataError{Fields: c.cardData}
	}
	if len(c.fields) == 0 {
		return nil
	}
	return &Error{Fields: c.fields}
}

// CardDataError names the request fields that hold card data: a card
// number in a text field, or a payment method that is not a token. It is
// answered CARD_DATA_REFUSED, before any other fault of the request.
type CardDataError struct {
	Fields []FieldError
}

func (e *CardDataError) Error() string {
	names := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		names[i] = f.Field
	}
	return "card data refused in: " + strings.Join(names, ", ")
}

// AddCardData records that field holds card data.
func (c *Collector) AddCardData(field, msg string) {
	c.cardData = append(c.cardData, FieldError{Field: field, Message: msg})
}
