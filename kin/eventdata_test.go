package kin_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

// Every event type kin records has a data type, and each data type goes
// through JSON and back unchanged, as the log's leaves carry it.
func TestEventDataRoundTrips(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, typ := range kin.EventTypes {
		v := kin.EventData(typ)
		if v == nil {
			t.Errorf("event type %s has no data type", typ)
			continue
		}
		rv := reflect.ValueOf(v).Elem()
		fill(t, rv)
		for i := range rv.NumField() {
			tag := rv.Type().Field(i).Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if !snake.MatchString(name) {
				t.Errorf("%s: field %s has JSON name %q, not snake_case", typ, rv.Type().Field(i).Name, name)
			}
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		// Through an event, as a follower of the stream decodes it.
		e := kin.Event{Seq: 3, Type: typ, Time: time.Unix(1_800_000_000, 0).UTC(), Data: b}
		wire, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		var back kin.Event
		if err := json.Unmarshal(wire, &back); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		got := kin.EventData(back.Type)
		if err := json.Unmarshal(back.Data, got); err != nil {
			t.Fatalf("%s: data %s: %v", typ, back.Data, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%s: round trip changed the data:\nsent %+v\ngot  %+v", typ, v, got)
		}
	}
	if kin.EventData("no.such.event") != nil {
		t.Error("an unknown event type has a data type")
	}
}

// fill sets every field of a struct to a value that is not its zero, so
// that a field the round trip drops shows.
func fill(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x-" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(7 + i))
		case reflect.Float64:
			f.SetFloat(0.5 + float64(i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			switch f.Type().Elem().Kind() {
			case reflect.Int, reflect.Int64:
				f.Set(reflect.MakeSlice(f.Type(), 2, 2))
				f.Index(0).SetInt(3)
				f.Index(1).SetInt(5)
			default:
				f.Set(reflect.ValueOf([]string{"a", "b"}).Convert(f.Type()))
			}
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			if p.Elem().Kind() != reflect.Int64 {
				t.Fatalf("%s.%s: a pointer fill does not know", v.Type(), v.Type().Field(i).Name)
			}
			p.Elem().SetInt(int64(9 + i))
			f.Set(p)
		case reflect.Struct:
			if f.Type() == reflect.TypeOf(time.Time{}) {
				f.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(i), 0).UTC()))
				continue
			}
			t.Fatalf("%s.%s: a struct field fill does not know", v.Type(), v.Type().Field(i).Name)
		default:
			t.Fatalf("%s.%s: kind %s fill does not know", v.Type(), v.Type().Field(i).Name, f.Kind())
		}
	}
}
