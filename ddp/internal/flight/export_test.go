package flight

// SetLibraryPrefixes replaces the packages counted as the library, for a
// test whose own frames would otherwise be library frames.
func SetLibraryPrefixes(p []string) (restore func()) {
	old := libraryPrefixes
	libraryPrefixes = p
	return func() { libraryPrefixes = old }
}
