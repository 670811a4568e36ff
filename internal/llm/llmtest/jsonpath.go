package llmtest

// Path walks a decoded JSON value (as in Request.Body): a string key indexes
// an object, an int an array. It returns nil where the path does not exist.
func Path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k < 0 || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
