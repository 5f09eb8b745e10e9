import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A numeric text field; `value` is the number typed, or `fallback` while the
// text is not (yet) a number.
TextField {
    id: field
    property real fallback: 0
    property real minValue: -1e9
    property real maxValue: 1e9
    readonly property real value: acceptableInput ? Number(text) : fallback

    Layout.fillWidth: true
    Layout.minimumWidth: 48
    Layout.preferredWidth: 64
    horizontalAlignment: TextInput.AlignRight
    selectByMouse: true
    inputMethodHints: Qt.ImhFormattedNumbersOnly
    color: acceptableInput ? Theme.text : Theme.bad
    validator: DoubleValidator {
        bottom: field.minValue
        top: field.maxValue
        decimals: 4
        notation: DoubleValidator.StandardNotation
        locale: "C"
    }
}
