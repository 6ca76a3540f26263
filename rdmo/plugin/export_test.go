package plugin

// MaxMsgSize exports maxMsgSize to the external tests.
const MaxMsgSize = maxMsgSize
