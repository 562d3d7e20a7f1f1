package endpoints

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// known is what the registered modules would name.
func known() map[string]bool {
	return map[string]bool{"payment.succeeded": true, "refund.succeeded": true}
}

// The event types are a set: their order and repeats make no other
// command, and the secret is no part of the fingerprint.
func TestEventTypesAreASet(t *testing.T) {
	a, err := CreateRequest{URL: "https://example.com/", EventTypes: []string{"refund.succeeded", "payment.succeeded", "refund.succeeded"}}.validate(known())
	if err != nil {
		t.Fatal(err)
	}
	b, err := CreateRequest{URL: "https://example.com/", EventTypes: []string{"payment.succeeded", "refund.succeeded"}}.validate(known())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.EventTypes, []string{"payment.succeeded", "refund.succeeded"}) || !bytes.Equal(a.Fingerprint(), b.Fingerprint()) {
		t.Errorf("types %v and %v, fingerprints differ: %v", a.EventTypes, b.EventTypes, !bytes.Equal(a.Fingerprint(), b.Fingerprint()))
	}
	all, err := CreateRequest{URL: "https://example.com/"}.validate(known())
	if err != nil || all.EventTypes != nil || bytes.Equal(all.Fingerprint(), a.Fingerprint()) {
		t.Errorf("every type: %v, %v; its fingerprint must differ from a list's", all.EventTypes, err)
	}
	other, _ := CreateRequest{URL: "https://example.com/other"}.validate(known())
	if bytes.Equal(other.Fingerprint(), all.Fingerprint()) || bytes.Equal(rotateFingerprint("we_1", RotationOverlap), rotateFingerprint("we_2", RotationOverlap)) ||
		bytes.Equal(rotateFingerprint("we_1", RotationOverlap), rotateFingerprint("we_1", 0)) {
		t.Error("two commands share a fingerprint")
	}
}

func TestValidateNamesEachInvalidField(t *testing.T) {
	_, err := CreateRequest{URL: "", EventTypes: []string{"payment.exploded"}, Description: "bad\x00"}.validate(known())
	var invalid *validate.Error
	if !errors.As(err, &invalid) {
		t.Fatalf("err = %v", err)
	}
	var fields []string
	for _, f := range invalid.Fields {
		fields = append(fields, f.Field)
	}
	if !slices.Equal(fields, []string{"url", "eventTypes", "description"}) {
		t.Errorf("fields %v", fields)
	}
}
