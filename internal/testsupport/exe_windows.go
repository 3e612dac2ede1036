package testsupport

// exeSuffix ends the name of a binary Build writes.
const exeSuffix = ".exe"
