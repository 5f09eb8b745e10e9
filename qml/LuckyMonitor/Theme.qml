pragma Singleton
import QtQuick
import LuckyMonitor.Backend

// Colours and sizes shared by the LuckyMonitor components. The colours come
// from the Python palette (lucky_monitor/ui/palette.py, the `Palette`
// singleton), so the widgets around the QML and the QML agree; no colour is
// written here.
QtObject {
    readonly property color window: Palette.window
    readonly property color surface: Palette.surface
    readonly property color control: Palette.control
    readonly property color line: Palette.line
    readonly property color text: Palette.text
    readonly property color dim: Palette.dim
    readonly property color accent: Palette.accent
    readonly property color engine: Palette.engine
    readonly property color trainer: Palette.trainer
    readonly property color good: Palette.good
    readonly property color warn: Palette.warn
    readonly property color bad: Palette.bad

    readonly property int small: 12
    readonly property int base: 13
    readonly property int title: 12
    readonly property int big: 21
    readonly property int keyWidth: 112

    // The colour of a command result, from its kind (MonitorBackend's
    // lastDrawResultKind / simModeResultKind, the services' resultKind role):
    // "ok", "error", "pending" or "" (nothing yet).
    function resultColor(kind: string): color {
        switch (kind) {
        case "ok":
            return good
        case "error":
            return bad
        default:
            return dim
        }
    }
}
