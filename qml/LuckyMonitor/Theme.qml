pragma Singleton
import QtQuick

// Colours and sizes shared by the LuckyMonitor components: a dark theme that
// stays readable from across a desk.
QtObject {
    readonly property color window: "#1b1d21"
    readonly property color surface: "#25282d"
    readonly property color control: "#3a3f47"
    readonly property color line: "#3b4048"
    readonly property color text: "#e9ebee"
    readonly property color dim: "#9aa1ab"
    readonly property color accent: "#5aa9ff"
    readonly property color engine: "#5aa9ff"
    readonly property color trainer: "#c792ea"
    readonly property color good: "#4cd07d"
    readonly property color warn: "#f5b935"
    readonly property color bad: "#ff5f56"

    readonly property int small: 12
    readonly property int base: 13
    readonly property int title: 12
    readonly property int big: 21
    readonly property int keyWidth: 112

    function resultColor(text) {
        if (text.startsWith("error") || text.startsWith("failed"))
            return bad
        if (text.startsWith("ok") || text.startsWith("success"))
            return good
        return dim
    }
}
