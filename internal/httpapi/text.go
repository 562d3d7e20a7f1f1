package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/paymentsapi/paymentsapi/internal/carddata"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// textFaults applies the text rules (validate.Text) to every string of
// body, the names of its members among them, and to every number: the one
// place they are applied, for every operation's command, before it is
// decoded. It answers the fields holding a card number (cardData) and
// those holding a control or format character (control), each named by
// its path as unknownFields names a member ("description",
// "items[2].sku"). A member's name at fault is named by the path of its
// object with "*" for the name ("*" at the top), so that the answer never
// repeats what it refuses. Reading stops where the body stops being JSON:
// the decoder explains that.
//
// Most bodies take the fast path, with no allocation: without a backslash
// every string is as the body spells it, so no byte of 0x7f or more
// means no control or format character, and no card number in the whole
// body means none in any of its strings.
func textFaults(body []byte) (cardData, control []problem.FieldError) {
	if !slices.ContainsFunc(body, func(c byte) bool { return c == '\\' || c >= 0x7f }) && !carddata.Contains(body) {
		return nil, nil
	}
	type level struct {
		object   bool
		path     string
		name     string // in an object: the member being read
		wantName bool   // in an object: before a member's name
		index    int    // in an array: the element being read
	}
	var open []*level
	// valuePath is the path of the value read next in top.
	valuePath := func(top *level) string {
		switch {
		case top == nil:
			return ""
		case !top.object:
			return top.path + "[" + strconv.Itoa(top.index) + "]"
		case top.path == "":
			return top.name
		default:
			return top.path + "." + top.name
		}
	}
	named := map[string]bool{}
	check := func(s, field string) {
		if named[field] {
			return
		}
		switch validate.Text(s) {
		case validate.TextCardData:
			cardData = append(cardData, problem.FieldError{Field: field, Message: validate.CardDataMessage})
			named[field] = true
		case validate.TextControl:
			control = append(control, problem.FieldError{Field: field, Message: validate.ControlMessage})
			named[field] = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return cardData, control
		}
		var top *level
		if n := len(open); n > 0 {
			top = open[n-1]
		}
		if top != nil && top.wantName {
			if name, ok := tok.(string); ok {
				field := "*"
				if top.path != "" {
					field = top.path + ".*"
				}
				check(name, field)
				top.name, top.wantName = name, false
				continue
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				open = append(open, &level{object: v == '{', path: valuePath(top), wantName: v == '{'})
				continue
			}
			open = open[:len(open)-1]
		case string:
			check(v, valuePath(top))
		case json.Number:
			if carddata.Contains(string(v)) && !named[valuePath(top)] {
				cardData = append(cardData, problem.FieldError{Field: valuePath(top), Message: validate.CardDataMessage})
				named[valuePath(top)] = true
			}
		}
		// A value ended: a scalar, or the object or array just closed.
		n := len(open)
		if n == 0 {
			return cardData, control
		}
		if open[n-1].object {
			open[n-1].wantName = true
		} else {
			open[n-1].index++
		}
	}
}

// cardDataProblem is the answer to a request holding card data: 400
// CARD_DATA_REFUSED naming the fields (never their values).
func cardDataProblem(fields []problem.FieldError) *problem.Problem {
	p := problem.New(http.StatusBadRequest, problem.CardDataRefused,
		"The request holds card data, which this API never takes: send a payment method token instead. Nothing of it was kept.")
	p.Errors = fields
	return p
}
