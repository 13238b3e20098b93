package client

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// jobPieces are members a job object may have, the server's and others.
var jobPieces = []string{
	`"job_id":"01M8HXH51K1JAW4FA864000000"`, `"job_id":null`, `"job_id":"a\"b"`, `"job_id":7`,
	`"namespace":"ns"`, `"queue":"q1"`, `"queue":"été"`, `"data":"aGVsbG8="`, `"data":""`, `"data":null`,
	`"data":"!!"`, `"ttl":0`, `"ttl":86400`, `"ttl":-1`, `"ttl":1.5`, `"ttl":1e3`, `"ttl":"5"`, `"ttl":01`,
	`"elapsed_ms":12`, `"remain_tries":2`, `"remain_tries":true`, `"remain_tries":99999999999999999999`,
	`"receipt":"00000000000000ff"`, `"state":"ready"`, `"priority":-3`, `"deliveries":1`,
	`"due_at_ms":1764000000000`, `"dead_at_ms":0`, `"dead_reason":"nacked"`,
	`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`, `"tracestate":"a=b"`,
	`"group":"shop-42"`, `"group":null`, `"group":3`, `"GROUP":"g"`,
	`"attributes":null`, `"attributes":{"k":"v"}`, `"attributes":{}`, `"extra":1`, `"extra":null`,
	`"JOB_ID":"x"`, `"msg":"new job"`, `"msg":""`, `"msg":null`, `"msg":1`, `"MSG":"x"`, `"ttl":-0`,
}

// TestScanJobMatchesJSON: whenever the hand-written scanner decodes a job
// object, it decodes it as encoding/json (Job.UnmarshalJSON) does; and it
// does decode the server's plain consume answers.
func TestScanJobMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	scanned := 0
	for i := range 20000 {
		n := rng.IntN(12)
		parts := make([]string, n)
		for k := range parts {
			parts[k] = jobPieces[rng.IntN(len(jobPieces))]
		}
		sep := ","
		if rng.IntN(5) == 0 {
			sep = " ,\n "
		}
		doc := "{" + strings.Join(parts, sep) + "}"
		if rng.IntN(20) == 0 {
			doc = doc[:rng.IntN(len(doc))] // truncated
		}
		var want Job
		wantErr := json.Unmarshal([]byte(doc), &want)
		var got Job
		if !scanJob([]byte(doc), &got) {
			continue
		}
		scanned++
		if wantErr != nil {
			t.Fatalf("%d: %s: scanned, but encoding/json fails: %v", i, doc, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: %s:\nscan %+v\njson %+v", i, doc, got, want)
		}
	}
	if scanned < 1000 {
		t.Fatalf("only %d of the objects were scanned", scanned)
	}
	for _, plain := range []string{
		`{"job_id":"01M8HXH51K1JAW4FA864000000","namespace":"ns","queue":"q","data":"aGVsbG8=","ttl":86400,"elapsed_ms":3,"remain_tries":0,"attributes":null,"receipt":"0123456789abcdef"}`,
		// A consume's answer (server/job.go): with "msg".
		`{"attributes":null,"data":"aGVsbG8=","elapsed_ms":3,"job_id":"01M8HXH51K1JAW4FA864000000","msg":"new job","namespace":"ns","queue":"q","receipt":"0123456789abcdef","remain_tries":0,"ttl":86400}`,
		// A grouped job's (issue #32).
		`{"attributes":null,"data":"aGVsbG8=","elapsed_ms":3,"group":"shop-42","job_id":"01M8HXH51K1JAW4FA864000000","msg":"new job","namespace":"ns","queue":"q","receipt":"0123456789abcdef","remain_tries":0,"ttl":86400}`,
	} {
		var j Job
		if !scanJob([]byte(plain), &j) || j.Receipt != "0123456789abcdef" || string(j.Body) != "hello" {
			t.Fatalf("the server's answer was not scanned: %s: %+v", plain, j)
		}
	}
}

// TestScanJobIDMatchesJSON: the same for a publish's answer.
func TestScanJobIDMatchesJSON(t *testing.T) {
	docs := []string{`{"job_id":"a","msg":"published"}`, `{"msg":"published","job_id":"b"}`, `{"job_id":"a\u0041"}`,
		`{"job_id":null}`, `{}`, `{"job_id":"a","job_id":"b"}`, `{"Job_Id":"c"}`, `{"job_id":1}`, `{"job_id":"x"`, ` {"job_id" : "y" } `}
	for i := range 100 {
		docs = append(docs, `{"job_id":"`+strconv.Itoa(i)+`"}`)
	}
	for _, doc := range docs {
		var want struct {
			JobID string `json:"job_id"`
		}
		wantErr := json.Unmarshal([]byte(doc), &want)
		if got, ok := scanJobID([]byte(doc)); ok && (wantErr != nil || got != want.JobID) {
			t.Fatalf("%s: scan %q, json %q %v", doc, got, want.JobID, wantErr)
		}
	}
	if id, ok := scanJobID([]byte(`{"job_id":"01M8HXH51K1JAW4FA864000000","msg":"published"}`)); !ok || id != "01M8HXH51K1JAW4FA864000000" {
		t.Fatalf("the server's answer: %q %v", id, ok)
	}
}

// TestScanJobIDsMatchesJSON: the same for a bulk publish's answer.
func TestScanJobIDsMatchesJSON(t *testing.T) {
	docs := []string{`{"job_ids":["a","b"],"msg":"published"}`, `{"msg":"published","job_ids":[]}`, `{"job_ids":["a\u0041"]}`,
		`{"job_ids":null}`, `{}`, `{"job_ids":["a"],"job_ids":["b"]}`, `{"Job_Ids":["c"]}`, `{"job_ids":[1]}`,
		`{"job_ids":["x"`, ` { "job_ids" : [ "y" , "z" ] } `, `{"job_ids":["a",]}`, `{"job_ids":"a"}`, `{"msg":"x"}`,
		`{"job_ids":["a"]} x`, `{"job_ids":["é"]}`}
	rng := rand.New(rand.NewPCG(34, 1))
	for range 200 {
		ids := make([]string, rng.IntN(65))
		for i := range ids {
			ids[i] = `"` + strconv.FormatUint(rng.Uint64(), 36) + `"`
		}
		docs = append(docs, `{"job_ids":[`+strings.Join(ids, ",")+`],"msg":"published"}`)
	}
	scanned := 0
	for _, doc := range docs {
		var want struct {
			JobIDs []string `json:"job_ids"`
		}
		wantErr := json.Unmarshal([]byte(doc), &want)
		got, ok := scanJobIDs([]byte(doc))
		if !ok {
			continue
		}
		scanned++
		if wantErr != nil || !reflect.DeepEqual(got, want.JobIDs) {
			t.Fatalf("%s: scan %q, json %q %v", doc, got, want.JobIDs, wantErr)
		}
	}
	if scanned < 200 {
		t.Fatalf("only %d of the answers were scanned", scanned)
	}
}

// TestBulkBodyMatchesEncoder: a bulk publish's body is what encoding/json
// (HTML escaping off) makes of its strings, every ASCII byte included,
// and its raw elements as they are.
func TestBulkBodyMatchesEncoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	for range 500 {
		jobs := make([]any, 1+rng.IntN(MaxBulk))
		for i := range jobs {
			b := make([]byte, rng.IntN(40))
			for k := range b {
				b[k] = byte(rng.IntN(0x80))
				if rng.IntN(50) == 0 {
					b[k] = byte(0x80 + rng.IntN(0x80)) // not ASCII: encoding/json's
				}
			}
			switch rng.IntN(5) {
			case 0:
				jobs[i] = json.RawMessage(`{"k":[1,2]}`)
			case 1:
				jobs[i] = map[string]int{"n": i}
			default:
				jobs[i] = string(b)
			}
		}
		got, err := bulkBody(jobs)
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		want.WriteByte('[')
		for i, j := range jobs {
			if i > 0 {
				want.WriteByte(',')
			}
			if raw, ok := j.(json.RawMessage); ok {
				want.Write(raw)
				continue
			}
			var one strings.Builder
			e := json.NewEncoder(&one)
			e.SetEscapeHTML(false)
			if err := e.Encode(j); err != nil {
				t.Fatal(err)
			}
			want.WriteString(strings.TrimSuffix(one.String(), "\n"))
		}
		want.WriteByte(']')
		if string(got) != want.String() {
			t.Fatalf("bulk body\n%q\nwant\n%q", got, want.String())
		}
	}
}
